"""The check catalogue: each family's probes and checks, declared once (catalogue.py gathers them)."""
