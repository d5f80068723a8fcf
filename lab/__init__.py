"""The lab: what builds networks and starts peers for tests and campaigns on one machine."""
