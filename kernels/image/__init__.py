"""Kernels of the image ops: codecs, resampling, geometric transforms and colour.

A decoded image's size is checked against `limits` before any pixel is allocated; the codec ops of
`codecs` read and write the bytes through the per-format modules.

    limits               how many pixels a decoded image may have (decompression bombs are refused)
    jpeg                 JPEG decoding/encoding as TensorFlow's libjpeg-turbo calls do it (through Pillow)
    jpeg_upsample        the compiled fancy chroma upsampling and YCbCr->RGB of TensorFlow's default JPEG decode
    png                  PNG decoding/encoding as TensorFlow's libpng calls do it
    gif                  GIF decoding as TensorFlow's gif_io.cc does it (frames composited)
    codecs               the codec ops: DecodeJpeg/Png/Gif/Bmp/Image, DecodeAndCropJpeg, ExtractJpegShape,
                         EncodeJpeg, EncodePng
    resize               ResizeBilinear, ResizeNearestNeighbor, ResizeBicubic, ResizeArea
    resize_compiled      the compiled loops of ResizeBilinear and ResizeNearestNeighbor (uint8, float32)
    scale_and_translate  ScaleAndTranslate (tf.image.resize v2's filters and antialiasing)
    crop_and_resize      CropAndResize (boxes resampled to one crop size)
    nms                  NonMaxSuppression (V1-V5), NonMaxSuppressionWithOverlaps: greedy box selection
    nms_compiled         the compiled NMS loops: NonMaxSuppression V1-V5 (float32), CombinedNonMaxSuppression
    stl_order            the orders libstdc++'s priority_queue and std::sort leave equal scores in
    combined_nms         CombinedNonMaxSuppression (batched, per class, top detections over all classes)
    padded_nms           _TensorgatePaddedNms: the padded, tiled NMS While loop (Model Garden's, tf.image's) as one op
    padded_nms_compiled  the compiled tile of the padded NMS op: cross- and self-suppression over non-zero boxes
    draw_boxes           DrawBoundingBoxes, DrawBoundingBoxesV2
    transform            ImageProjectiveTransformV2/V3
    colorspace           RGBToHSV, HSVToRGB, AdjustContrastv2, AdjustSaturation, AdjustHue
"""
