"""Tests of the Trainer service: losses, batching, sessions, checkpoints and the gRPC servicer."""
