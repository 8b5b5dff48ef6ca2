"""In-memory stand-ins for the library's boundaries (the state table, the Kinesis stream), for unit tests of its steps.

Each fake does only what a contract suite checks on the real thing too (tests/contract): a behaviour the suite cannot
check against DynamoDB (moto) or Kinesis (kinesalite) is not faked, and a call outside it fails loudly.
"""
