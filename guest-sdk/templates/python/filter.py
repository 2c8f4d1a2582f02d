"""{{name}}: a filter transform, forwarding the records that pass a test and dropping the rest.

Each record's value is a JSON object with a numeric field `amount`; records with an amount of at
least `min_amount` (configuration, default 100) are forwarded unchanged (key, value, headers,
timestamp). Change `process` to make it yours, then run `weir transform test`.
"""

from weir_guest import Transform, TransformError, export


class MinAmount(Transform):
    """The transform. The host creates one per operator instance (one per input partition)."""

    def __init__(self, config):
        # Called once per instance with the operator's configuration (for the samples:
        # `[test] config` in weir-transform.toml). Raising refuses the configuration.
        config.allow_only(["min_amount"])
        self.min_amount = config.get_float("min_amount", 100.0)

    def process(self, record, emit):
        # Called once per record, in offset order. Raising TransformError fails the batch (none
        # of its outputs are written); the pipeline's error policy decides what happens next.
        value = record.value_json()
        amount = value.get("amount") if isinstance(value, dict) else None
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise TransformError("value has no numeric field `amount`")
        if amount >= self.min_amount:
            emit.forward(record)


# componentize-py looks for `WitWorld`.
WitWorld = export(MinAmount)
