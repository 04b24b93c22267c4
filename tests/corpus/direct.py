"""The corpus pipelines as NVIDIA's examples write them, with fn.* calls, placed on the CPU.

Each function is the DSL file of the same name written as direct DALI calls: its lines as the example
has them, `device` set to "cpu" where the example says mixed/gpu, `.gpu()` left out, and the reader
arguments the runner adds (name="Reader", shard_id=0, num_shards=1, pad_last_batch=True).
"""
from nvidia.dali import fn, math, pipeline_def, types
from nvidia.dali.auto_aug import auto_augment, rand_augment, trivial_augment
from nvidia.dali.types import Constant

SHARD = dict(shard_id=0, num_shards=1, pad_last_batch=True)


@pipeline_def
def resnet50_train(data_dir, crop=24):
    images, labels = fn.readers.file(file_root=data_dir, shard_id=0, num_shards=1, random_shuffle=True,
                                     pad_last_batch=True, name="Reader")
    images = fn.image_decoder_random_crop(images, device="cpu", output_type=types.RGB,
                                          device_memory_padding=211025920, host_memory_padding=140544512,
                                          random_aspect_ratio=[0.8, 1.25], random_area=[0.1, 1.0], num_attempts=100)
    images = fn.resize(images, device="cpu", resize_x=crop, resize_y=crop, interp_type=types.INTERP_TRIANGULAR)
    mirror = fn.random.coin_flip(probability=0.5)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(crop, crop),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=mirror)
    return images, labels


@pipeline_def
def resnet50_val(data_dir, crop=24, size=28):
    images, labels = fn.readers.file(file_root=data_dir, shard_id=0, num_shards=1, random_shuffle=False,
                                     pad_last_batch=True, name="Reader")
    images = fn.image_decoder(images, device="cpu", output_type=types.RGB)
    images = fn.resize(images, device="cpu", size=size, mode="not_smaller", interp_type=types.INTERP_TRIANGULAR)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(crop, crop),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=False)
    return images, labels


def _efficientnet_train(data_dir, automatic_augmentation, image_size=24, interpolation=types.INTERP_LINEAR,
                        output_layout="CHW"):
    jpegs, labels = fn.readers.file(name="Reader", file_root=data_dir, shard_id=0, num_shards=1,
                                    random_shuffle=True, pad_last_batch=True)
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                           random_aspect_ratio=[0.75, 4.0 / 3.0], random_area=[0.08, 1.0])
    images = fn.resize(images, size=[image_size, image_size], interp_type=interpolation, antialias=False)
    rng = fn.random.coin_flip(probability=0.5)
    images = fn.flip(images, horizontal=rng)
    if automatic_augmentation == "autoaugment":
        output = auto_augment.auto_augment_image_net(images, shape=[image_size, image_size])
    elif automatic_augmentation == "trivialaugment":
        output = trivial_augment.trivial_augment_wide(images, shape=[image_size, image_size])
    else:
        output = images
    output = fn.crop_mirror_normalize(output, dtype=types.FLOAT, output_layout=output_layout,
                                      crop=(image_size, image_size), mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
    return output, labels


@pipeline_def
def efficientnet_train_none(data_dir):
    return _efficientnet_train(data_dir, "none")


@pipeline_def(enable_conditionals=True)
def efficientnet_train_autoaugment(data_dir):
    return _efficientnet_train(data_dir, "autoaugment")


@pipeline_def(enable_conditionals=True)
def efficientnet_train_trivialaugment(data_dir):
    return _efficientnet_train(data_dir, "trivialaugment")


@pipeline_def
def efficientnet_val(data_dir, image_size=28, image_crop=24, interpolation=types.INTERP_LINEAR, output_layout="CHW"):
    jpegs, label = fn.readers.file(name="Reader", file_root=data_dir, shard_id=0, num_shards=1,
                                   random_shuffle=False, pad_last_batch=True)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.resize(images, resize_shorter=image_size, interp_type=interpolation, antialias=False)
    output = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout=output_layout,
                                      crop=(image_crop, image_crop), mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
    return output, label


@pipeline_def(enable_conditionals=True)
def auto_aug_doc(data_dir, image_size=24):
    jpegs, labels = fn.readers.file(file_root=data_dir, name="Reader", **SHARD)
    shapes = fn.peek_image_shape(jpegs)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    augmented_images = auto_augment.auto_augment_image_net(images, shape=shapes)
    resized_images = fn.resize(augmented_images, size=[image_size, image_size])
    return resized_images, labels


@pipeline_def(enable_conditionals=True)
def rand_augment_doc(data_dir, image_size=24):
    jpegs, labels = fn.readers.file(file_root=data_dir, name="Reader", **SHARD)
    shapes = fn.peek_image_shape(jpegs)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    augmented_images = rand_augment.rand_augment(images, shape=shapes, n=3, m=17)
    resized_images = fn.resize(augmented_images, size=[image_size, image_size])
    return resized_images, labels


@pipeline_def()
def gallery_erase_slice(data_dir):
    encoded, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.image_decoder(encoded, device="cpu", output_type=types.RGB)
    images = fn.erase(images, device="cpu", anchor=[0.3, 0.2], normalized_anchor=True,
                      shape=[0.5, 0.6], normalized_shape=True, axis_names='HW')
    images = fn.slice(images, device="cpu", rel_start=[0.3, 0.2], rel_shape=[0.5, 0.6], axis_names='HW')
    return images, labels


@pipeline_def()
def gallery_geometry(data_dir):
    encoded, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.image_decoder(encoded, device="cpu", output_type=types.RGB)
    images = fn.water(images, device="cpu")
    images = fn.sphere(images, device="cpu")
    images = fn.rotate(images, device="cpu", angle=30, interp_type=types.INTERP_LINEAR, fill_value=0)
    images = fn.warp_affine(images, device="cpu", matrix=[1.0, 0.8, 0.0, 0.0, 1.2, 0.0],
                            interp_type=types.INTERP_LINEAR)
    return images, labels


@pipeline_def()
def gallery_color(data_dir):
    encoded, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.image_decoder(encoded, device="cpu", output_type=types.RGB)
    images = fn.brightness_contrast(images, device="cpu", brightness=0.5, contrast=1.5)
    images = fn.hsv(images, device="cpu", hue=45., saturation=0.2)
    images = fn.jpeg_compression_distortion(images, quality=5)
    return images, labels


@pipeline_def()
def gallery_paste_flip(data_dir):
    encoded, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.image_decoder(encoded, device="cpu", output_type=types.RGB)
    images = fn.paste(images, device="cpu", ratio=2., fill_value=(55, 155, 155), paste_x=.1, paste_y=.7)
    images = fn.flip(images, device="cpu", vertical=0, horizontal=1)
    images = fn.flip(images, device="cpu", vertical=1, horizontal=0)
    return images, labels


@pipeline_def
def resize_modes(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.resize(images, resize_x=64, resize_y=48)
    images = fn.resize(images, size=[40, 40], mode="not_larger")
    images = fn.resize(images, resize_shorter=32, max_size=40)
    images = fn.resize(images, size=(30, 20), mode="stretch", interp_type=types.INTERP_LANCZOS3)
    return images, labels


@pipeline_def
def color_space(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.color_space_conversion(images, image_type=types.RGB, output_type=types.BGR)
    images = fn.color_space_conversion(images, image_type=types.BGR, output_type=types.YCbCr)
    gray = fn.color_space_conversion(images, image_type=types.YCbCr, output_type=types.GRAY)
    return gray, labels


@pipeline_def
def hsv_random_grayscale(data_dir, probability=0.3):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, seed=7, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    converted = fn.hsv(images, hue=120, saturation=1, value=0.4)
    saturate = fn.random.coin_flip(probability=1.0 - probability)
    saturate = fn.cast(saturate, dtype=types.FLOAT)
    converted = fn.hsv(converted, saturation=saturate)
    return converted, labels


@pipeline_def
def brightness_contrast(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.brightness_contrast(images, brightness=fn.random.uniform(range=[0.5, 1.5]), brightness_shift=0.1,
                                    contrast=fn.random.uniform(range=[0.5, 1.5]), contrast_center=128)
    images = fn.brightness(images, brightness=1.2)
    images = fn.contrast(images, contrast=0.8, contrast_center=100)
    return images, labels


@pipeline_def
def gaussian_blur(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu")
    blurred = fn.gaussian_blur(images, window_size=5, sigma=2)
    blurred = fn.gaussian_blur(blurred, sigma=fn.random.uniform(range=[0.1, 2.0], seed=42), window_size=[3, 5])
    return blurred, labels


@pipeline_def
def crop_mirror_normalize(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=1, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    mirror = fn.random.coin_flip(probability=0.5)
    images = fn.crop_mirror_normalize(images, crop=(32, 32), crop_pos_x=fn.random.uniform(range=(0, 1)),
                                      crop_pos_y=fn.random.uniform(range=(0, 1)), mean=128., std=1, mirror=mirror,
                                      dtype=types.DALIDataType.FLOAT16, output_layout=types.NHWC)
    images = fn.crop_mirror_normalize(images, mean=[0, 0, 0], std=[255, 255, 255], output_layout=types.NCHW,
                                      pad_output=True, dtype=types.FLOAT)
    return images, labels


@pipeline_def
def rotate_random(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    angle = fn.random.uniform(range=(-10.0, 10.0))
    images = fn.rotate(images, angle=angle, keep_size=True, fill_value=0, interp_type=types.INTERP_NN)
    matrix = fn.transforms.rotation(angle=fn.uniform(range=(-45, 45)), center=[20, 28])
    images = fn.warp_affine(images, matrix=matrix, fill_value=200, inverse_map=False, size=(40, 40),
                            interp_type=types.INTERP_LINEAR)
    return images, labels


@pipeline_def
def expr_conditional_mux(data_dir):
    input_buf, labels = fn.readers.file(device="cpu", file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    imgs = fn.decoders.image(input_buf, device="cpu", output_type=types.RGB)
    imgs_adjusted = fn.brightness_contrast(imgs, brightness=3, contrast=1.5)
    condition = fn.random.coin_flip(dtype=types.DALIDataType.BOOL)
    neg_condition = condition ^ True
    out = condition * imgs_adjusted + neg_condition * imgs
    return out, labels


def _cats_and_dogs(data_dir):
    cats_jpegs, labels = fn.readers.file(device="cpu", file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    dogs_jpegs, _ = fn.readers.file(device="cpu", file_root=data_dir, random_shuffle=True, seed=3, name="Reader2",
                                    **SHARD)
    cats = fn.decoders.image(cats_jpegs, device="cpu", output_type=types.RGB)
    dogs = fn.decoders.image(dogs_jpegs, device="cpu", output_type=types.RGB)
    cats = fn.resize(cats, resize_x=40, resize_y=40)
    dogs = fn.resize(dogs, resize_x=40, resize_y=40)
    return cats, dogs, labels


@pipeline_def
def expr_blend_float(data_dir):
    cats, dogs, labels = _cats_and_dogs(data_dir)
    blend_float = (0.4 * cats + 0.6 * dogs) / 2
    return fn.cast(blend_float, dtype=types.DALIDataType.UINT8), labels


@pipeline_def
def expr_blend_uint16(data_dir):
    cats, dogs, labels = _cats_and_dogs(data_dir)
    blend_uint16 = (Constant(4).uint16() * cats + Constant(6).uint16() * dogs) // Constant(20).uint16()
    return fn.cast(blend_uint16, dtype=types.DALIDataType.UINT8), labels


@pipeline_def
def expr_constants(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    l = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)  # noqa: E741 (the example's name)
    r = fn.random.uniform(range=[1, 5], dtype=types.INT32)
    add_200 = l + 200
    mul_075 = l * 0.75
    sub_15 = Constant(15).float32() - r
    div_result = add_200 // r
    scalars = fn.random.uniform(range=[0.0, 10.0])
    out = mul_075 + div_result - sub_15 + scalars
    out = fn.cast(-out + 255, dtype=types.UINT8)
    return out, labels


@pipeline_def
def expr_math_functions(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.cast(images, dtype=types.FLOAT) / 255
    gamma = fn.random.uniform(range=[0.5, 1.5])
    images = math.pow(images, gamma)
    images = math.sqrt(images) * math.abs(math.cos(gamma)) + math.sin(images) * 0.25
    images = math.max(math.min(images, 1.0), 0.0)
    images = math.floor(images * 255 + 0.5) - math.ceil(images * 0.0)
    mask = images > 128
    images = math.clamp(images * mask + (images <= 128) * images / 2, 0, 255)
    images = fn.cast(images, dtype=types.UINT8)
    return images, labels


@pipeline_def
def expr_argument_inputs(data_dir):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader", **SHARD)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.rotate(images, angle=fn.random.uniform(range=[-10, 10]) * 2, fill_value=0)
    angle = fn.random.uniform(range=(-10.0, 10.0))
    images = fn.rotate(images, angle=-angle, keep_size=True, fill_value=0)
    brightness = fn.random.uniform(range=[0.5, 1.5])
    images = fn.brightness_contrast(images, brightness=brightness * 0.5 + 0.5,
                                    contrast=2 - fn.random.uniform(range=[0.5, 1.5]))
    return images, labels
