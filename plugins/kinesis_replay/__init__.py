"""kinesis-replay: land a Kinesis stream in a lake exactly once, as bounded, replayable batches."""

__version__ = "0.1.0"
