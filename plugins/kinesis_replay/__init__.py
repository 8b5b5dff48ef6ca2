"""kinesis-replay: land a Kinesis stream in a lake exactly once, as bounded, replayable batches."""

# PEP 440: the release under way (CHANGELOG.md, "Unreleased"); make dist builds the package of this version.
__version__ = "0.2.0.dev0"
