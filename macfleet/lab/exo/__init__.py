"""The exo stand-in of the lab (docs/lab-exo.md). A lab fixture, not part of the product.

standin.py  the server shipped inside an exo build (stdlib only, self-contained; copied into the build)
build.py    write_build(out_dir, version, broken=...) and render_launchd_plist(...) / plist_path(...)
"""
