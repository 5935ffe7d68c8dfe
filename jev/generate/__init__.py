"""Generating text: sampling and the lossless accept rule, the decoding loop, drafters and the
verify-length scheduler, text fields after a decision, and constrained decoding of an answer."""
