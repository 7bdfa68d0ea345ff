"""Tests of the Rollout service: engine, batcher, agent-loop FSM, policies and the gRPC API."""
