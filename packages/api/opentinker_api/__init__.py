"""OpenTinker's gRPC API: stubs generated from protos/ (do not edit; run scripts/gen_protos.py),
and `conventions`, what the wire needs beyond the protos (hand-written)."""
