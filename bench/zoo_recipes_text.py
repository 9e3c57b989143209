"""Zoo recipes for sequence models: keras-hub backbones in small random configurations (Keras 3, exported with
`model.export`; token ids and a padding mask in), and tf_keras (Keras 2) recurrent text classifiers saved with
`tf.saved_model.save`, whose LSTM/GRU layers export while loops."""

from __future__ import annotations

from pathlib import Path

from zoo_common import Recipe

__all__ = ["RECIPES"]

SEQ = 128
VOCAB = 5000
RNN_SEQ = 64
TOKENS = {"kind": "tokens", "vocab": VOCAB}
MASK = {"kind": "mask"}
SMALL = {"num_layers": 2, "hidden_dim": 128}


def _export_backbone(out: Path, backbone, feeds: list[dict]) -> dict:
    backbone.export(str(out / "model"), format="tf_saved_model", verbose=False)
    return {"format": "saved_model", "feeds": feeds}


def _token_feeds(prefix: str = "", seq: int = SEQ) -> list[dict]:
    return [{"alias": f"{prefix}token_ids", "sample_shape": [seq], "gen": TOKENS},
            {"alias": f"{prefix}padding_mask", "sample_shape": [seq], "gen": MASK}]


def bert(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.BertBackbone(vocabulary_size=VOCAB, num_heads=2, intermediate_dim=512,
                                             max_sequence_length=SEQ, **SMALL)
    segments = {"alias": "segment_ids", "sample_shape": [SEQ], "gen": {"kind": "int", "low": 0, "high": 2}}
    return _export_backbone(out, backbone, [*_token_feeds(), segments])


def roberta(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.RobertaBackbone(vocabulary_size=VOCAB, num_heads=2, intermediate_dim=512,
                                                max_sequence_length=SEQ, **SMALL)
    return _export_backbone(out, backbone, _token_feeds())


def distil_bert(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.DistilBertBackbone(vocabulary_size=VOCAB, num_heads=2, intermediate_dim=512,
                                                   max_sequence_length=SEQ, **SMALL)
    return _export_backbone(out, backbone, _token_feeds())


def gpt2(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=VOCAB, num_heads=2, intermediate_dim=512,
                                             max_sequence_length=SEQ, **SMALL)
    return _export_backbone(out, backbone, _token_feeds())


def vit(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(image_shape=(224, 224, 3), patch_size=16, num_heads=2, mlp_dim=512,
                                            **SMALL)
    return _export_backbone(out, backbone, [{"alias": "*", "gen": {"kind": "image", "low": -1.0, "high": 1.0}}])


def llama(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.LlamaBackbone(vocabulary_size=VOCAB, num_query_heads=4, num_key_value_heads=2,
                                              intermediate_dim=256, **SMALL)
    return _export_backbone(out, backbone, _token_feeds())


def mistral(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.MistralBackbone(vocabulary_size=VOCAB, num_query_heads=4, num_key_value_heads=2,
                                                intermediate_dim=256, sliding_window=64, **SMALL)
    return _export_backbone(out, backbone, _token_feeds())


def gemma(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone(vocabulary_size=VOCAB, num_query_heads=4, num_key_value_heads=1,
                                              intermediate_dim=256, head_dim=32, **SMALL)
    return _export_backbone(out, backbone, _token_feeds())


def t5(out: Path) -> dict:
    import keras_hub

    backbone = keras_hub.models.T5Backbone(vocabulary_size=VOCAB, num_heads=2, intermediate_dim=256, **SMALL)
    return _export_backbone(out, backbone, [*_token_feeds("encoder_"), *_token_feeds("decoder_", SEQ // 2)])


def _rnn_classifier(out: Path, body) -> dict:
    import tensorflow as tf
    import tf_keras

    tokens = tf_keras.Input(shape=(RNN_SEQ,), dtype="int32", name="tokens")
    embedded = tf_keras.layers.Embedding(VOCAB, 64, mask_zero=True)(tokens)
    logits = tf_keras.layers.Dense(4, name="logits")(body(tf_keras.layers, embedded))
    model = tf_keras.Model(tokens, logits)
    tf.saved_model.save(model, str(out / "model"))
    return {"format": "saved_model", "feeds": [{"alias": "tokens", "gen": TOKENS}]}


def lstm_text(out: Path) -> dict:
    return _rnn_classifier(out, lambda layers, x: layers.LSTM(128)(x))


def gru_text(out: Path) -> dict:
    return _rnn_classifier(out, lambda layers, x: layers.GRU(128)(x))


def bilstm_text(out: Path) -> dict:
    def body(layers, x):
        return layers.GlobalMaxPooling1D()(layers.Bidirectional(layers.LSTM(64, return_sequences=True))(x))

    return _rnn_classifier(out, body)


def _hub(fn, cls: str, note: str = "") -> Recipe:
    return Recipe(fn, f"keras_hub.models.{cls} (Keras 3, random {note or '2 layers, hidden 128'}), model.export")


RECIPES = {
    "bert_hub": _hub(bert, "BertBackbone"),
    "roberta_hub": _hub(roberta, "RobertaBackbone"),
    "distil_bert_hub": _hub(distil_bert, "DistilBertBackbone"),
    "gpt2_hub": _hub(gpt2, "GPT2Backbone"),
    "vit_hub": _hub(vit, "ViTBackbone", "2 layers, hidden 128, patch 16, 224x224"),
    "llama_hub": _hub(llama, "LlamaBackbone", "2 layers, hidden 128, 4 query / 2 key-value heads"),
    "mistral_hub": _hub(mistral, "MistralBackbone", "2 layers, hidden 128, GQA, sliding window 64"),
    "gemma_hub": _hub(gemma, "GemmaBackbone", "2 layers, hidden 128, multi-query"),
    "t5_hub": _hub(t5, "T5Backbone", "2+2 layers, hidden 128, encoder-decoder forward"),
    "lstm_text": Recipe(lstm_text, "tf_keras Embedding(mask_zero)+LSTM(128) classifier, tf.saved_model.save"),
    "gru_text": Recipe(gru_text, "tf_keras Embedding(mask_zero)+GRU(128) classifier, tf.saved_model.save"),
    "bilstm_text": Recipe(bilstm_text, "tf_keras Embedding(mask_zero)+Bidirectional(LSTM(64))+max-pool classifier, "
                          "tf.saved_model.save"),
}
