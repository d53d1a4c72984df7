"""TEST DOUBLE of Intel's Habana bridge (see tests/fakes/README.md). Not Intel software."""

FAKE = True
