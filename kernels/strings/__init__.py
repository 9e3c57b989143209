"""Kernels of the string ops. Strings live on the host as numpy object arrays of `bytes` (`tensors`).

    tensors         string tensors as the kernels hold them, and the helpers that read them
    manipulation    case, stripping, lengths, substrings, joins (StringLower, StringStrip, Substr, ...)
    regex           StaticRegexReplace, RegexReplace, RegexFullMatch, StaticRegexFullMatch (RE2's own binding)
    unicode         UnicodeDecode(WithOffsets), UnicodeEncode, UnicodeTranscode
    hash_functions  FarmHash Fingerprint64, keyed SipHash-2-4, TensorFlow's legacy Hash64, bit for bit
    hashing         StringToHashBucket(Fast, Strong), Fingerprint: strings into buckets
    conversions     StringToNumber, EncodeBase64/DecodeBase64, StringFormat
    formatting      AsString, as TensorFlow writes each element with C's printf
    split           StringSplit(V2), StringNGrams, tokens and n-grams
"""
