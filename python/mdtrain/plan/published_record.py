"""The planner against the published record (issue #16): cases whose scaling was published, the
inputs they were measured with, and the planner's own replay of them.

- Horovod (Sergeev & Del Balso 2018, "Horovod: fast and easy distributed deep learning in
  TensorFlow", arXiv:1802.05799, §5 and Figs. 6-7 — section and figure numbers from memory; the
  quoted text and the batch size read in Horovod's docs/benchmarks):
  "128 servers with 4 Pascal GPUs each connected by RoCE-capable 25 Gbit/s network. Horovod
  achieves 90% scaling efficiency for both Inception V3 and ResNet-101, and 68% scaling efficiency
  for VGG-16", run with tf_cnn_benchmarks `--batch_size 64` (per GPU) on synthetic data.
  Scaling efficiency = images/s on 512 GPUs ÷ (512 × images/s on one GPU).
- Megatron-LM (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", SC'21, §2.2.1-2.2.2): the pipeline bubble of GPipe and of
  PipeDream-Flush (1F1B) is (p−1)/m of the ideal time m·(t_f + t_b); interleaving v chunks per
  device divides it by v.

The models are built here as layer lists from their published architectures (VGG-16:
Simonyan & Zisserman 2015, configuration D; ResNet-101: He et al. 2016, Table 1), so the FLOPs
and parameter counts are computed, not typed in. The GPUs and network are a Cluster built from
datasheet figures below. Then the core's data-parallel StepPlan is priced (price_plan.py) on 1 and
on 512 GPUs."""
import dataclasses
import math

from mdtrain.plan import price_pipeline, price_plan
from mdtrain.plan.alpha_beta import AlphaBeta
from mdtrain.plan.cluster import Cluster
from mdtrain.plan.synthetic_profile import LayerSpec, profile_from_flops

IMAGENET_CLASSES = 1000


# ---- architectures --------------------------------------------------------------------------

class _Builder:
    """Appends layers while tracking the feature map (height = width, channels)."""

    def __init__(self, size, channels):
        self.size, self.channels, self.layers = size, channels, []
        self.input_values = size * size * channels

    def conv(self, name, out, k, stride=1, bias=True, batch_norm=False, size_in=None, channels_in=None):
        size_in = self.size if size_in is None else size_in
        cin = self.channels if channels_in is None else channels_in
        size = math.ceil(size_in / stride)  # "same" padding
        macs = k * k * cin * out * size * size
        params = k * k * cin * out + (out if bias else 0) + (2 * out if batch_norm else 0)  # BN: gamma, beta
        self.layers.append(LayerSpec(name, "Conv2D", params, size * size * out, 2.0 * macs))
        self.size, self.channels = size, out
        return self

    def pool(self, name, k, stride):
        self.size = math.ceil(self.size / stride)
        values = self.size * self.size * self.channels
        self.layers.append(LayerSpec(name, "Pooling2D", 0, values, float(values * k * k), backward_ratio=1.0))
        return self

    def global_pool(self, name):
        values = self.size * self.size * self.channels
        self.layers.append(LayerSpec(name, "GlobalAveragePooling2D", 0, self.channels, float(values), 1.0))
        self.size = 1
        return self

    def dense(self, name, units):
        cin = self.size * self.size * self.channels
        self.layers.append(LayerSpec(name, "Dense", cin * units + units, units, 2.0 * cin * units))
        self.size, self.channels = 1, units
        return self


def vgg16(image_size=224, classes=IMAGENET_CLASSES):
    """VGG-16 (configuration D): 13 3×3 convolutions with biases in 5 blocks, each block ending in
    a 2×2 max-pool, then Dense 4096, 4096, classes. ImageNet: 138,357,544 parameters."""
    b = _Builder(image_size, 3)
    for block, (convs, width) in enumerate([(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)], start=1):
        for i in range(convs):
            b.conv(f"block{block}_conv{i + 1}", width, 3)
        b.pool(f"block{block}_pool", 2, 2)
    b.dense("fc1", 4096).dense("fc2", 4096).dense("predictions", classes)
    return b.layers, b.input_values


def resnet(depth=101, image_size=224, classes=IMAGENET_CLASSES, stride_in_1x1=True):
    """ResNet-50/101/152 with bottleneck blocks (He et al. 2016, Table 1): a 7×7/2 convolution, a
    3×3/2 max-pool, stages of [3, 4, 6|23|36, 3] blocks (1×1, 3×3, 1×1 convolutions, each with
    batch normalization and no bias; a 1×1 projection on each stage's first block), global average
    pooling, Dense classes. stride_in_1x1: where a stage's first block downsamples — the original
    ("v1", as tf_cnn_benchmarks' `resnet101`) strides the first 1×1 convolution; "v1.5"
    (torchvision) the 3×3. A layer here is a convolution with its batch normalization (the residual
    add and ReLUs are not counted as FLOPs)."""
    blocks = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}[depth]
    b = _Builder(image_size, 3)
    b.conv("conv1", 64, 7, stride=2, bias=False, batch_norm=True).pool("pool1", 3, 2)
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=2):
        for block in range(count):
            stride = 2 if block == 0 and stage > 2 else 1
            size_in, cin, name = b.size, b.channels, f"conv{stage}_block{block + 1}"
            b.conv(f"{name}_1", width, 1, stride=stride if stride_in_1x1 else 1, bias=False, batch_norm=True)
            b.conv(f"{name}_2", width, 3, stride=1 if stride_in_1x1 else stride, bias=False, batch_norm=True)
            b.conv(f"{name}_3", 4 * width, 1, bias=False, batch_norm=True)
            if block == 0:
                b.conv(f"{name}_projection", 4 * width, 1, stride=stride, bias=False, batch_norm=True,
                       size_in=size_in, channels_in=cin)
    b.global_pool("avg_pool").dense("predictions", classes)
    return b.layers, b.input_values


MODELS = {"vgg16": vgg16, "resnet101": lambda: resnet(101)}


def params(layers):
    return sum(layer.params for layer in layers)


def forward_macs(layers):
    """Multiply-adds per image forward of the layers with a kernel (what "GFLOPs" of these
    models usually counts: VGG-16 ~15.5 G, ResNet-101 ~7.6-7.8 G)."""
    return sum(layer.forward_flops / 2 for layer in layers if layer.kind in ("Conv2D", "Dense"))


# ---- the Horovod cluster --------------------------------------------------------------------

def _gbps(gigabits):
    return gigabits * 1e9 / 8


def horovod_cluster(hosts=128):
    """The Horovod paper's cluster: `hosts` servers × 4 Pascal GPUs, a RoCE-capable 25 Gbit/s
    network. The paper says "Pascal", not which: a Tesla P100 PCIe 16 GB is assumed (NVIDIA P100
    datasheet: FP32 9.3 TFLOP/s, 732 GB/s HBM2); the GPUs of a server talk over PCIe 3.0 ×16
    (15.75 GB/s per direction, nominal). One 25 Gb/s NIC per server is shared by its 4 GPUs, so
    each GPU's inter-host ring gets 6.25 Gb/s (collectives.all_reduce costs one ring of a host's
    shard at the per-GPU inter-host link, as on the DGX presets where each GPU has its own NIC).
    Latencies are typical values, not published ones."""
    return Cluster(name="horovod-p100x4-25gbe", hosts=hosts, devices_per_host=4, peak_flops=9.3e12,
                   memory_bytes=16e9, memory_bandwidth=732e9,
                   intra_host=AlphaBeta(alpha=10e-6, beta=1 / 15.75e9),
                   inter_host=AlphaBeta(alpha=25e-6, beta=1 / (_gbps(25) / 4)),
                   overlaps_communication=True,
                   source="Horovod paper's setup (128 servers x 4 Pascal GPUs, RoCE-capable 25 Gbit/s); "
                          "P100 PCIe assumed: NVIDIA datasheet figures (9.3 TFLOP/s FP32, 732 GB/s), PCIe 3.0 "
                          "x16 inside a server, one 25 Gb/s NIC per 4 GPUs; latencies typical")


# ---- the cases ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PublishedScaling:
    case: str
    model: str
    published_efficiency: float
    gpus: int
    gpus_per_host: int
    batch_per_gpu: int
    source: str


HOROVOD_SOURCE = ("Sergeev & Del Balso 2018, arXiv:1802.05799, §5 / Figs. 6-7 (and Horovod docs/benchmarks): "
                  "128 servers x 4 Pascal GPUs, 25 Gbit/s RoCE-capable network, tf_cnn_benchmarks, batch 64 per GPU")

HOROVOD_CASES = (
    PublishedScaling("Horovod ResNet-101, 512 GPUs", "resnet101", 0.90, 512, 4, 64, HOROVOD_SOURCE),
    PublishedScaling("Horovod VGG-16, 512 GPUs", "vgg16", 0.68, 512, 4, 64, HOROVOD_SOURCE),
)

# Horovod's Tensor Fusion packs ready gradients into one buffer before each all-reduce; 64 MiB is
# its default HOROVOD_FUSION_THRESHOLD (a later default, from memory; the paper gives none).
HOROVOD_FUSION_BYTES = 64 << 20


# The compute of one GPU: its published single-GPU throughput with the same software (TensorFlow
# 1.x, tf_cnn_benchmarks, synthetic data, batch 64 per GPU, sgd) — TensorFlow's performance
# benchmarks, "Details for NVIDIA DGX-1 (NVIDIA Tesla P100)", training synthetic data, 1 GPU
# (tensorflow.org/performance/benchmarks, May 2017). ResNet-101 is not in that table: its time per
# image is interpolated linearly in forward multiply-adds between ResNet-50 and ResNet-152.
TF_BENCHMARKS_SOURCE = ("TensorFlow performance benchmarks (May 2017), DGX-1 / 1x Tesla P100, tf_cnn_benchmarks, "
                        "synthetic data, batch 64: ResNet-50 219, ResNet-152 91.8, VGG16 154 images/s")
P100_IMAGES_PER_S = {"resnet50": 219.0, "resnet152": 91.8, "vgg16": 154.0}


def single_gpu_images_per_s(model):
    """The published (or, for ResNet-101, interpolated) images/s of one P100 training `model`."""
    if model in P100_IMAGES_PER_S:
        return P100_IMAGES_PER_S[model]
    if model == "resnet101":
        (x0, t0), (x1, t1) = ((forward_macs(resnet(d)[0]), 1.0 / P100_IMAGES_PER_S[f"resnet{d}"]) for d in (50, 152))
        x = forward_macs(resnet(101)[0])
        return 1.0 / (t0 + (t1 - t0) * (x - x0) / (x1 - x0))
    raise ValueError(f"no published single-GPU throughput for {model!r}")


def model_profile(model, cluster, compute="published"):
    """The model's profile on one of `cluster`'s GPUs. compute="published": every layer at the rate
    that gives the published single-GPU images/s; "peak": at the GPU's peak FLOP/s (the planner's
    preset assumption, with no measurement of the model at all)."""
    layers, input_values = MODELS[model]()
    per_image = sum(x.forward_flops * (1 + x.backward_ratio) for x in layers)
    if compute == "published":
        rate = per_image * single_gpu_images_per_s(model)
    elif compute == "peak":
        rate = cluster.peak_flops
    else:
        raise ValueError(f"model_profile: compute must be 'published' or 'peak', got {compute!r}")
    # tf_cnn_benchmarks' optimizer here is plain SGD: no slots.
    return profile_from_flops(model, layers, input_values, rate, optimizer="sgd", optimizer_slots=0)


@dataclasses.dataclass
class Prediction:
    case: PublishedScaling
    efficiency: float            # the planner's predicted scaling efficiency
    compute: str                 # how one GPU's layer times were set ("published" or "peak")
    step_one_s: float
    step_all_s: float
    breakdown: dict              # of the step on all GPUs

    @property
    def difference(self):
        """predicted − published, in efficiency (0.05 = 5 points)."""
        return self.efficiency - self.case.published_efficiency


def predict_scaling(case, compute="published", bucket_bytes=HOROVOD_FUSION_BYTES, cluster=None):
    """The planner's replay of `case` (weak scaling: batch_per_gpu on every GPU): step time on one
    GPU and on case.gpus, efficiency = step on one ÷ step on all."""
    cluster = cluster if cluster is not None else horovod_cluster(hosts=case.gpus // case.gpus_per_host)
    prof = model_profile(case.model, cluster, compute)
    one = price_plan.price(price_plan.replicated_plan(prof, "OneDeviceStrategy", 1), prof, cluster,
                           case.batch_per_gpu)
    workers = case.gpus // case.gpus_per_host
    step = price_plan.replicated_plan(prof, "MultiWorkerMirroredStrategy", case.gpus // workers, workers=workers,
                                      host_replicas=False, bucket_bytes=bucket_bytes)
    many = price_plan.price(step, prof, cluster, case.batch_per_gpu * case.gpus)
    return Prediction(case, one.step_time_s / many.step_time_s, compute, one.step_time_s,
                      many.step_time_s, many.breakdown)


# ---- Megatron's bubble ----------------------------------------------------------------------

MEGATRON_SOURCE = ("Narayanan et al. 2021, SC'21 (arXiv:2104.04473), §2.2.1: bubble time fraction "
                   "t_pb / t_id = (p-1)/m for GPipe and PipeDream-Flush (1F1B); §2.2.2: (1/v)(p-1)/m interleaved")


def megatron_bubble_formula(p, m, v=1):
    return (p - 1) / (v * m)


def replayed_bubble(p, m, schedule, forward_s=1.0, backward_s=2.0):
    """The bubble over the ideal time (Megatron's t_pb / t_id) of the core's own `schedule`
    (gpipe, 1f1b) replayed with p equal stages: the mean idle time of a stage inside the
    pipeline's span ÷ its busy time m·(t_f + t_b)."""
    cluster = horovod_cluster(hosts=1)  # the links do not matter: stage_costs carry no bytes
    prof = profile_from_flops("stages", [LayerSpec(f"stage{s}", "Dense", 0, 1, 1.0) for s in range(p)], 1,
                              cluster.peak_flops)  # only its layer count matters: stage_costs set the times
    _, bubble, span = price_pipeline.pipeline(prof, cluster, p, m, schedule, 1, m, stage_costs=[(forward_s, backward_s)] * p)
    return bubble / (span - bubble)


def record_table(compute="published"):
    """Rows (case, published, predicted, difference, source) for every case."""
    rows = []
    for case in HOROVOD_CASES:
        pred = predict_scaling(case, compute)
        rows.append((case.case, case.published_efficiency, pred.efficiency, pred.difference, case.source))
    for p, m, schedule in ((4, 8, "gpipe"), (8, 32, "1f1b"), (8, 64, "1f1b")):
        rows.append((f"Megatron bubble p={p} m={m} {schedule}", megatron_bubble_formula(p, m),
                     replayed_bubble(p, m, schedule), replayed_bubble(p, m, schedule) - megatron_bubble_formula(p, m),
                     MEGATRON_SOURCE))
    return rows


def format_table(rows):
    lines = [f"{'case':<36} {'published':>9} {'predicted':>9} {'diff':>7}  source"]
    for case, published, predicted, diff, source in rows:
        lines.append(f"{case:<36} {published:9.3f} {predicted:9.3f} {diff:+7.3f}  {source[:60]}")
    return "\n".join(lines)
