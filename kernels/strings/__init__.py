"""Kernels of the string ops. Strings live on the host as numpy object arrays of `bytes` (`tensors`).

    tensors         string tensors as the kernels hold them, and the helpers that read them
    manipulation    case, stripping, lengths, substrings, joins (StringLower, Substr, UnsortedSegmentJoin, ...)
    regex           StaticRegexReplace, RegexReplace, RegexFullMatch, StaticRegexFullMatch (RE2's own binding)
    unicode         UnicodeDecode(WithOffsets), UnicodeEncode, UnicodeTranscode
    unicode_script  UnicodeScript: each code point's ICU script code
    hash_functions  FarmHash Fingerprint64, keyed SipHash-2-4, TensorFlow's legacy Hash64, bit for bit
    hashing         StringToHashBucket(Fast, Strong), Fingerprint: strings into buckets
    conversions     StringToNumber, EncodeBase64/DecodeBase64, StringFormat
    formatting      AsString, as TensorFlow writes each element with C's printf
    split           StringSplit(V2), StringNGrams, tokens and n-grams
    serialization   DecodeCompressed (zlib, gzip), ParseTensor, SerializeTensor: strings carrying encoded data
"""
