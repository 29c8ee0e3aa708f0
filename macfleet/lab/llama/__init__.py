"""llama.cpp stand-ins for the lab: a build directory whose `bin/rpc-server` listens where told."""
