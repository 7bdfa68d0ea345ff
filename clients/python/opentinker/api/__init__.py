"""Generated gRPC API of OpenTinker (do not edit; run scripts/gen_protos.py)."""
