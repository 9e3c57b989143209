"""Zoo recipes for the rest of what users bring: a Model Garden (tf-models-official) RetinaNet detection export,
a tf.feature_column model serving tf.Example strings, TensorFlow Recommenders' retrieval index and DCN ranker,
and TF1 graphs (a conv net, an LSTM over v1 control flow) frozen with convert_variables_to_constants."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from zoo_common import Recipe, calibrate_batch_norm, sample_images

__all__ = ["RECIPES"]

DETECTION_SIZE = 256
EDUCATION = ["Bachelors", "HS-grad", "Masters", "Doctorate", "Some-college", "Assoc-voc", "Prof-school", "11th"]
OCCUPATIONS = [f"occupation-{i}" for i in range(40)]
USERS = [f"user-{i}" for i in range(500)]
ITEMS = [f"item-{i}" for i in range(2000)]


def retinanet(out: Path) -> dict:
    """Model Garden's retinanet_resnetfpn_coco with a ResNet-18 backbone and 128-filter FPN and heads at 256x256,
    exported through official.vision.serving.detection.DetectionModule (uint8 images in, NMS'd boxes out)."""
    import tensorflow as tf
    import tf_keras
    from official.core import exp_factory
    from official.vision import registry_imports  # noqa: F401  (registers the experiment configs)
    from official.vision.serving import detection

    params = exp_factory.get_exp_config("retinanet_resnetfpn_coco")
    params.task.model.backbone.resnet.model_id = 18
    params.task.model.decoder.fpn.num_filters = 128
    params.task.model.head.num_filters = 128
    params.task.model.input_size = [DETECTION_SIZE, DETECTION_SIZE, 3]
    # NOTE: NMS v2 compares the top pre_nms_top_k boxes of each of the 91 classes pairwise whatever their
    # scores: at the default 5000 TensorFlow takes ~6 s an image here, which no batch-32 timing can afford.
    params.task.model.detection_generator.pre_nms_top_k = 1000
    module = detection.DetectionModule(params, batch_size=None, input_image_size=[DETECTION_SIZE, DETECTION_SIZE],
                                       input_type="image_tensor")
    images = sample_images(np.random.default_rng(1), 16, DETECTION_SIZE, DETECTION_SIZE, -2.0, 2.0)
    calibrated = calibrate_batch_norm(module.model, tf.constant(images, tf.float32),
                                      tf_keras.layers.BatchNormalization)
    print(f"  calibrated {calibrated} BatchNormalization layers")
    # NOTE: the class head's last conv starts at stddev 1e-5, which leaves every score at the 0.01 prior, under
    # the 0.05 threshold, whatever the image: nothing would reach NMS. With stddev 0.015 some tens of
    # anchor-class pairs per image pass the threshold, as with a trained detector.
    _scale_classifier(module.model.head, np.random.default_rng(2))
    signatures = module.get_inference_signatures({"image_tensor": "serving_default"})
    tf.saved_model.save(module, str(out / "model"), signatures=signatures)
    return {"format": "saved_model", "exempt": ["image_info"],
            "feeds": [{"alias": "inputs", "sample_shape": [DETECTION_SIZE, DETECTION_SIZE, 3],
                       "gen": {"kind": "image", "low": 0, "high": 255}}]}


def _scale_classifier(head, rng: np.random.Generator) -> None:
    classifiers = head._classifier  # the head exposes no other handle on its last conv
    for layer in classifiers.values() if isinstance(classifiers, dict) else [classifiers]:
        for weight in layer.weights:
            if "kernel" in weight.name:
                weight.assign(rng.normal(0.0, 0.015, weight.shape).astype(np.float32))


def feature_columns(out: Path) -> dict:
    """A tf_keras DenseFeatures model over bucketized, crossed, embedding, indicator and hashed columns, served
    as TF Estimator users did: serialized tf.Example strings parsed with the columns' parse spec."""
    import tensorflow as tf
    import tf_keras

    fc = tf.feature_column
    age = fc.numeric_column("age")
    age_buckets = fc.bucketized_column(age, boundaries=[25, 30, 35, 40, 45, 50, 55, 60, 65])
    education = fc.categorical_column_with_vocabulary_list("education", EDUCATION)
    occupation = fc.categorical_column_with_hash_bucket("occupation", 64)
    region = fc.categorical_column_with_identity("region", 100)
    columns = [
        age, fc.numeric_column("hours"), age_buckets,
        fc.embedding_column(education, 8), fc.indicator_column(occupation), fc.embedding_column(region, 8),
        fc.embedding_column(fc.crossed_column([age_buckets, "education"], 1000), 8),
    ]
    model = tf_keras.Sequential([tf_keras.layers.DenseFeatures(columns), tf_keras.layers.Dense(64, "relu"),
                                 tf_keras.layers.Dense(1)])
    spec = fc.make_parse_example_spec(columns)

    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            return {"score": self.model(tf.io.parse_example(examples, spec))}

    serving = Serving()
    tf.saved_model.save(serving, str(out / "model"), signatures={"serving_default": serving.serve})
    features = {"age": {"type": "float", "low": 18, "high": 80}, "hours": {"type": "float", "low": 0, "high": 60},
                "education": {"type": "bytes", "vocab": EDUCATION + ["unknown"]},
                "occupation": {"type": "bytes", "vocab": OCCUPATIONS}, "region": {"type": "int", "low": 0, "high": 100}}
    return {"format": "saved_model", "feeds": [{"alias": "examples", "gen": {"kind": "example", "features": features}}]}


def tfrs_retrieval(out: Path) -> dict:
    """A TFRS two-tower model's query tower behind tfrs.layers.factorized_top_k.BruteForce over the candidate
    tower's embeddings: user ids in, the top 10 item scores and ids out."""
    import tensorflow as tf
    import tensorflow_recommenders as tfrs
    import tf_keras

    def tower(vocab):
        return tf_keras.Sequential([tf_keras.layers.StringLookup(vocabulary=vocab),
                                    tf_keras.layers.Embedding(len(vocab) + 1, 32), tf_keras.layers.Dense(32)])

    users, items = tower(USERS), tower(ITEMS)
    index = tfrs.layers.factorized_top_k.BruteForce(users, k=10)
    candidates = tf.constant(ITEMS)
    index.index(items(candidates), candidates)
    index(tf.constant(USERS[:2]))
    tf.saved_model.save(index, str(out / "model"))
    return {"format": "saved_model",
            "feeds": [{"alias": "*", "sample_shape": [], "gen": {"kind": "strings", "vocab": USERS + ["new-user"]}}]}


def tfrs_dcn(out: Path) -> dict:
    """A DCN ranking model (tfrs.layers.dcn.Cross twice, then a dense tower) over id embeddings and numeric
    features, taking a dict of dense features."""
    import tensorflow as tf
    import tensorflow_recommenders as tfrs
    import tf_keras

    inputs = {"user_id": tf_keras.Input((), dtype=tf.string, name="user_id"),
              "item_id": tf_keras.Input((), dtype=tf.string, name="item_id"),
              "age": tf_keras.Input((1,), name="age"), "price": tf_keras.Input((1,), name="price")}
    user = tf_keras.layers.Embedding(len(USERS) + 1, 16)(tf_keras.layers.StringLookup(vocabulary=USERS)(inputs["user_id"]))
    item = tf_keras.layers.Embedding(len(ITEMS) + 1, 16)(tf_keras.layers.StringLookup(vocabulary=ITEMS)(inputs["item_id"]))
    x0 = tf_keras.layers.Concatenate()([user, item, inputs["age"] / 80.0, tf.math.log1p(inputs["price"])])
    x = tfrs.layers.dcn.Cross(projection_dim=16)(x0)
    x = tfrs.layers.dcn.Cross(projection_dim=16)(x0, x)
    x = tf_keras.layers.Dense(64, activation="relu")(x)
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="score")(x))
    tf.saved_model.save(model, str(out / "model"))
    return {"format": "saved_model", "feeds": [
        {"alias": "user_id", "gen": {"kind": "strings", "vocab": USERS}},
        {"alias": "item_id", "gen": {"kind": "strings", "vocab": ITEMS}},
        {"alias": "age", "gen": {"kind": "uniform", "low": 18, "high": 80}},
        {"alias": "price", "gen": {"kind": "uniform", "low": 1, "high": 500}}]}


def _freeze(sess, out: Path, outputs: list[str]) -> None:
    import tensorflow as tf

    frozen = tf.compat.v1.graph_util.convert_variables_to_constants(sess, sess.graph.as_graph_def(), outputs)
    (out / "model.pb").write_bytes(frozen.SerializeToString())


def tf1_convnet(out: Path) -> dict:
    """A TF1 conv net (tf.compat.v1.layers conv, batch norm, pooling, dense), frozen. Its batch norms are
    calibrated by one run of the training graph's update ops with momentum 0."""
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_v2_behavior()
    layers = v1.layers

    def net(x, training):
        with v1.variable_scope("net", reuse=v1.AUTO_REUSE):
            for i, filters in enumerate((32, 64, 128, 128)):
                x = layers.conv2d(x, filters, 3, padding="same", use_bias=False, name=f"conv{i}")
                x = tf.nn.relu(layers.batch_normalization(x, momentum=0.0, training=training, name=f"bn{i}"))
                x = layers.max_pooling2d(x, 2, 2)
            return layers.dense(layers.flatten(x), 10, name="logits")

    images = v1.placeholder(tf.float32, [None, 64, 64, 3], name="images")
    train_logits = net(images, True)
    tf.identity(net(images, False), name="logits")
    with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        batch = sample_images(np.random.default_rng(1), 16, 64, 64, -1.0, 1.0)
        sess.run([train_logits, v1.get_collection(v1.GraphKeys.UPDATE_OPS)], {images: batch})
        _freeze(sess, out, ["logits"])
    return {"format": "graph_def", "fetches": ["logits:0"],
            "feeds": [{"alias": "images:0", "dtype": "float32", "sample_shape": [64, 64, 3],
                       "gen": {"kind": "image", "low": -1.0, "high": 1.0}}]}


def tf1_lstm(out: Path) -> dict:
    """A TF1 text classifier: embedding lookup, tf.compat.v1.nn.dynamic_rnn over an LSTMCell with per-sample
    lengths (v1 control flow: Enter/Merge/Switch/Exit and TensorArrays), dense logits; frozen."""
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_v2_behavior()
    tokens = v1.placeholder(tf.int32, [None, 64], name="tokens")
    lengths = tf.reduce_sum(tf.cast(tokens > 0, tf.int32), axis=1)
    table = v1.get_variable("embedding", [5000, 64])
    cell = v1.nn.rnn_cell.LSTMCell(128)
    _, state = v1.nn.dynamic_rnn(cell, tf.nn.embedding_lookup(table, tokens), sequence_length=lengths,
                                 dtype=tf.float32)
    tf.identity(v1.layers.dense(state.h, 4), name="logits")
    with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        _freeze(sess, out, ["logits"])
    return {"format": "graph_def", "fetches": ["logits:0"],
            "feeds": [{"alias": "tokens:0", "dtype": "int32", "sample_shape": [64],
                       "gen": {"kind": "tokens", "vocab": 5000}}]}


RECIPES = {
    "retinanet_garden": Recipe(retinanet, "Model Garden retinanet_resnetfpn_coco (ResNet-18, FPN 128, 256x256, "
                               "pre-NMS top 1000), DetectionModule image_tensor export, tf.saved_model.save"),
    "feature_columns": Recipe(feature_columns, "tf.feature_column + tf_keras DenseFeatures, tf.Example strings in, "
                              "tf.saved_model.save"),
    "tfrs_retrieval": Recipe(tfrs_retrieval, "tensorflow_recommenders BruteForce top-10 over a two-tower model, "
                             "tf.saved_model.save", legacy_keras=True),
    "tfrs_dcn": Recipe(tfrs_dcn, "tensorflow_recommenders DCN (2 Cross layers) ranker, dense feature dict in, "
                       "tf.saved_model.save", legacy_keras=True),
    "tf1_convnet": Recipe(tf1_convnet, "TF1 graph (tf.compat.v1.layers conv/BN/pool/dense), frozen GraphDef",
                          legacy_keras=True),
    "tf1_lstm": Recipe(tf1_lstm, "TF1 graph (dynamic_rnn LSTMCell, v1 control flow), frozen GraphDef",
                       legacy_keras=True),
}
