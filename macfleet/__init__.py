"""macfleet: provision and run Thunderbolt-mesh Mac clusters for distributed LLM inference."""

__version__ = "0.1.0"
