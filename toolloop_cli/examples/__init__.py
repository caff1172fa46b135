"""Example tool handlers used by the shipped registries, the demo and the tests."""
