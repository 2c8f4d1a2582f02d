"""{{name}}: an aggregate transform, keeping running totals per key in state.

Each record has a key and a JSON object value with an integer field `amount`. The transform keeps
`[count, total]` per key in state (checkpointed exactly once with the outputs, so a restart
neither loses nor double-counts a record) and emits the key's new totals for every record.
Change `process` to make it yours, then run `weir transform test`.
"""

from weir_guest import Output, Transform, TransformError, export, state


class Totals(Transform):
    """The transform. The host creates one per operator instance (one per input partition)."""

    def __init__(self, config):
        # Called once per instance with the operator's configuration (for the samples:
        # `[test] config` in weir-transform.toml). Raising refuses the configuration.
        config.allow_only([])  # no configuration keys: any key is an error naming it

    def process(self, record, emit):
        # Called once per record, in offset order. Raising TransformError fails the batch (none
        # of its outputs or state writes take effect); the error policy decides what follows.
        if record.key is None:
            raise TransformError("record has no key to aggregate by")
        value = record.value_json()
        amount = value.get("amount") if isinstance(value, dict) else None
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise TransformError("value has no integer field `amount`")

        def add(totals):
            count, total = totals or [0, 0]
            return [count + 1, total + amount]

        # update_json keeps the key's value parsed for the rest of the batch and stores its
        # JSON once, when the batch ends.
        count, total = state.update_json(record.key, add)
        emit(Output.json(record.key, {"count": count, "total": total}))


# componentize-py looks for `WitWorld`.
WitWorld = export(Totals)
