"""The oracle: expected outputs of the topologies, computed in one process."""

from pgval.oracle.expected import ExpectedOutputs, deduplicate_inputs, expected_outputs
from pgval.oracle.stream import OracleHorizonError, stream_expected_outputs

__all__ = [
    "ExpectedOutputs",
    "OracleHorizonError",
    "deduplicate_inputs",
    "expected_outputs",
    "stream_expected_outputs",
]
