"""{{name}}: a map transform, one output per input record.

Each record's value is a JSON object with a string field `name`; the output keeps the record's
key and adds `"greeting": "Hello, <name>!"` to the object. Change `process` to make it yours,
then run `weir transform test` (and `--update` once the new outputs are right).
"""

from weir_guest import Output, Transform, TransformError, export


class Greeter(Transform):
    """The transform. The host creates one per operator instance (one per input partition)."""

    def __init__(self, config):
        # Called once per instance with the operator's configuration (for the samples:
        # `[test] config` in weir-transform.toml). Raising refuses the configuration.
        config.allow_only([])  # no configuration keys: any key is an error naming it

    def process(self, record, emit):
        # Called once per record, in offset order. Raising TransformError fails the batch (none
        # of its outputs are written); the pipeline's error policy decides what happens next.
        value = record.value_json()
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            raise TransformError("value has no string field `name`")
        value["greeting"] = f"Hello, {value['name']}!"
        # A new output has no headers; `Output.header` adds some.
        emit(Output.json(record.key, value))


# componentize-py looks for `WitWorld`.
WitWorld = export(Greeter)
