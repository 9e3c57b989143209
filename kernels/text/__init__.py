"""Kernels of TensorFlow Text's ops (tensorflow-text 2.21, which TensorFlow Serving's model server links):
normalizers, tokenizers, trimmers and the SentencePiece ops. Strings live on the host as numpy object arrays
of `bytes`, as in kernels.strings; Unicode data comes from ICU (pyicu-wheels), as TF Text's own does.

    sentencepiece       SentencepieceOp (the model resource) and the ops on its handle, run by the sentencepiece library
    fast_sentencepiece  TFText>FastSentencepieceTokenize/Detokenize over their flatbuffer models, as TF Text runs them
    icu_normalization   ICU's normalizeUTF8 replayed with the edits it records (spans copied and replaced)
    normalize           CaseFoldUTF8, NormalizeUTF8(WithOffsetsMap), FindSourceOffsets (the offsets-map variant)
    whitespace          WhitespaceTokenizeWithOffsets (code points) and TFText>WhitespaceTokenizeWithOffsetsV2
    unicode_script_tokenizer  UnicodeScriptTokenizeWithOffsets: code points split where the ICU script changes
    regex_split         RegexSplitWithOffsets: strings split at RE2 delimiter matches, delimiters kept or not
    utf8_binarize       TFText>Utf8Binarize: each character's code point bits, as floats
    byte_split          TFText>ByteSplitWithOffsets and TFText>ByteSplitByOffsets
    bert_chars          text as the BERT kernels see it: ICU's U8_NEXT steps, whitespace, punctuation and CJK
    darts_trie          the darts-clone double-array trie inside TF Text's flatbuffer models
    flatbuffer_models   the WordPiece, BERT-normalizer and phrase flatbuffer models, read and decoded once per model
    token_cache         words already tokenized, kept in flat arrays that a batch's tokens are gathered from
    wordpiece           WordpieceTokenizeWithOffsets: longest-match-first WordPiece over a vocabulary lookup table
    fast_wordpiece      FastWordpieceTokenizeWithOffsets, TFText>FastWordpieceDetokenize on the model's own trie
    fast_bert_normalizer  FastBertNormalize: BERT's lower-casing, accent stripping and control characters, with offsets
    phrase              PhraseTokenize and TFText>PhraseDetokenize: longest vocabulary phrases over whitespace words
    trimmers            TFText>RoundRobinTrim and TFText>RoundRobinGenerateMasks: N segments fitted to a length
    ngrams              TFText>NgramsStringJoin: windows of strings joined along the last axis
    split_merge         SplitMergeTokenizeWithOffsets and TokenizerFromLogits: characters grouped into tokens by labels
    rouge               RougeL: ROUGE-L F, precision and recall of hypothesis rows against reference rows
    constrained_sequence  ConstrainedSequence: Viterbi or greedy decoding under allowed transitions and weights
    spanning_tree       MaxSpanningTree: the maximum directed spanning tree (or forest) of each digraph, as MstSolver
    boise               TFText>OffsetsToBoiseTags and TFText>BoiseTagsToOffsets: BOISE tags from typed spans and back
    sentence_fragments  SentenceFragmentsV2 (StateBasedSentenceBreaker): sentence fragments by a state machine over bytes
    token_sentence_fragments  SentenceFragments (deprecated): sentence fragments over a document's tokens
"""
