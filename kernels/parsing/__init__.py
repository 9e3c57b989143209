"""Kernels of the ops that parse serialized records into tensors: tf.Example and SequenceExample, CSV, JSON
Examples and raw bytes.

tf.Example bytes flow from the wire format to the parser to the ops:

    feature_wire             Feature values read from their serialized bytes, as TensorFlow's fast parser does
    example_parser           TensorFlow's fast Example parser: configs, and batches into dense/sparse/ragged
    example_wire_walk        the compiled walk over a batch's wire bytes, twin of example_parser's per-Example one
    example                  ParseExampleV2, ParseExample, ParseSingleExample
    sequence_example         ParseSequenceExampleV2, ParseSequenceExample (the fast parser)
    single_sequence_example  ParseSingleSequenceExample (TensorFlow's older kernel, which this op still uses)
    decode_json_example      DecodeJSONExample: Examples in protobuf's JSON mapping, serialized
    decode_csv               DecodeCSV
    decode_raw               DecodeRaw, DecodePaddedRaw
"""
