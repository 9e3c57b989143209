"""Zoo recipes for image models: keras.applications (Keras 3, random weights, BatchNorm calibrated, logit
heads) exported with `model.export`, RegNet from tf_keras.applications (Keras 3 has none) saved with
`tf.saved_model.save`, and a classifier whose serving signature takes JPEG bytes and decodes
them in `tf.map_fn`, saved with `tf.saved_model.save` as a tf.Module."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from zoo_common import Recipe, calibrate_batch_norm, sample_images

__all__ = ["RECIPES"]

SIZE = 224
CALIBRATION_BATCH = 16
# keras.applications with include_preprocessing take pixels in [0, 255]; the others take their own
# preprocess_input's range, approximated here by a range of the same scale.
PIXELS = (0.0, 255.0)
UNIT = (-1.0, 1.0)


def _calibrated(model, low: float, high: float, batch_norm: type | None = None) -> int:
    import keras

    rng = np.random.default_rng(1)
    batch = sample_images(rng, CALIBRATION_BATCH, SIZE, SIZE, low, high).astype(np.float32)
    return calibrate_batch_norm(model, batch, batch_norm or keras.layers.BatchNormalization)


def keras_application(out: Path, cls: str, value_range: tuple[float, float], **kwargs) -> dict:
    import keras

    model = getattr(keras.applications, cls)(weights=None, input_shape=(SIZE, SIZE, 3), classifier_activation=None,
                                             **kwargs)
    calibrated = _calibrated(model, *value_range)
    print(f"  calibrated {calibrated} BatchNormalization layers")
    model.export(str(out / "model"), format="tf_saved_model", verbose=False)
    return {"format": "saved_model",
            "feeds": [{"alias": "*", "gen": {"kind": "image", "low": value_range[0], "high": value_range[1]}}]}


def tf_keras_application(out: Path, cls: str, value_range: tuple[float, float]) -> dict:
    """A Keras 2 application (tf_keras.applications: RegNet is there, not in Keras 3), tf.saved_model.save."""
    import tensorflow as tf
    import tf_keras

    model = getattr(tf_keras.applications, cls)(weights=None, input_shape=(SIZE, SIZE, 3), classifier_activation=None)
    calibrated = _calibrated(model, *value_range, batch_norm=tf_keras.layers.BatchNormalization)
    print(f"  calibrated {calibrated} BatchNormalization layers")
    tf.saved_model.save(model, str(out / "model"))
    return {"format": "saved_model",
            "feeds": [{"alias": "*", "gen": {"kind": "image", "low": value_range[0], "high": value_range[1]}}]}


def jpeg_classifier(out: Path) -> dict:
    """MobileNetV3Small behind a signature taking encoded JPEGs: each is decoded, resized and cast in
    tf.map_fn, as a user's serving wrapper does for TF Serving's image-bytes requests."""
    import keras
    import tensorflow as tf

    model = keras.applications.MobileNetV3Small(weights=None, input_shape=(SIZE, SIZE, 3),
                                                classifier_activation=None)
    print(f"  calibrated {_calibrated(model, *PIXELS)} BatchNormalization layers")

    def decode(jpeg):
        pixels = tf.io.decode_jpeg(jpeg, channels=3)
        return tf.image.resize(tf.cast(pixels, tf.float32), [SIZE, SIZE])

    class Serving(tf.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve(self, image_bytes):
            images = tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([SIZE, SIZE, 3], tf.float32))
            return {"logits": self.net(images, training=False)}

    module = Serving(model)
    tf.saved_model.save(module, str(out / "model"), signatures={"serving_default": module.serve})
    return {"format": "saved_model",
            "feeds": [{"alias": "image_bytes", "gen": {"kind": "jpeg", "height": 256, "width": 256}}]}


def _app(cls: str, value_range: tuple[float, float], **kwargs) -> Recipe:
    return Recipe(partial(keras_application, cls=cls, value_range=value_range, **kwargs),
                  f"keras.applications.{cls} (Keras 3, weights=None), model.export")


RECIPES = {
    "mobilenet_v2": _app("MobileNetV2", UNIT),
    "mobilenet_v3_small": _app("MobileNetV3Small", PIXELS),
    "mobilenet_v3_large": _app("MobileNetV3Large", PIXELS),
    "efficientnet_b0": _app("EfficientNetB0", PIXELS),
    "efficientnet_v2_b0": _app("EfficientNetV2B0", PIXELS),
    "resnet50": _app("ResNet50", (-128.0, 128.0)),
    "resnet50_v2": _app("ResNet50V2", UNIT),
    "densenet121": _app("DenseNet121", (-2.0, 2.0)),
    "inception_v3": _app("InceptionV3", UNIT),
    "xception": _app("Xception", UNIT),
    "nasnet_mobile": _app("NASNetMobile", UNIT),
    "convnext_tiny": _app("ConvNeXtTiny", PIXELS),
    "mobilenet_v1": _app("MobileNet", UNIT),
    "regnetx002": Recipe(partial(tf_keras_application, cls="RegNetX002", value_range=PIXELS),
                         "tf_keras.applications.RegNetX002 (Keras 2, weights=None), tf.saved_model.save"),
    "mobilenet_v3_jpeg": Recipe(jpeg_classifier, "keras.applications.MobileNetV3Small behind a tf.Module signature "
                                "decoding JPEG bytes in tf.map_fn, tf.saved_model.save"),
}
