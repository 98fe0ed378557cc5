"""The planner against the published record (mdtrain.plan.published_record, docs/planner.md):
the architectures' FLOPs and parameters are the well-known totals, the replayed scaling of
Horovod's 512-GPU runs is within 10 points of the published efficiency, and the replayed pipeline
bubble is Megatron's (p−1)/m."""
import dataclasses

import pytest

from mdtrain.plan import AlphaBeta

from mdtrain.plan import published_record as record


# ---- the architectures ------------------------------------------------------------------------

def test_vgg16_parameters_and_flops_are_the_published_totals():
    layers, input_values = record.vgg16()
    assert input_values == 224 * 224 * 3
    assert record.params(layers) == 138_357_544  # Keras / torchvision VGG16, ImageNet head
    assert record.forward_macs(layers) == pytest.approx(15.47e9, rel=0.005)  # "15.5 GFLOPs" (multiply-adds)
    assert sum(1 for x in layers if x.kind == "Conv2D") == 13 and sum(1 for x in layers if x.kind == "Dense") == 3


def test_resnet101_parameters_and_flops_are_the_published_totals():
    v1, _ = record.resnet(101)
    v15, _ = record.resnet(101, stride_in_1x1=False)
    assert record.params(v1) == record.params(v15) == 44_549_160  # torchvision resnet101, BN gamma/beta included
    assert record.forward_macs(v1) == pytest.approx(7.6e9, rel=0.01)  # He et al. 2016, Table 1: 7.6 x 10^9
    assert record.forward_macs(v15) == pytest.approx(7.8e9, rel=0.01)  # torchvision: 7.80 GFLOPs (multiply-adds)
    assert record.params(record.resnet(50)[0]) == 25_557_032  # torchvision resnet50: the builder generalises
    assert record.forward_macs(record.resnet(50)[0]) == pytest.approx(3.8e9, rel=0.05)  # Table 1: 3.8 x 10^9


def test_synthetic_profile_runs_each_layer_at_the_given_rate():
    cluster = record.horovod_cluster()
    layers, input_values = record.vgg16()
    prof = record.profile_from_flops("vgg16", layers, input_values, 5e12)
    per_image = sum(x.forward_flops * (1 + x.backward_ratio) for x in layers)
    assert prof.time(64) == pytest.approx(64 * per_image / 5e12)
    assert prof.params == 138_357_544 and prof.update_s is None
    # calibrated to the published single-GPU throughput: one GPU's step is 64 images at 154 images/s
    published = record.model_profile("vgg16", cluster)
    assert published.time(64) == pytest.approx(64 / 154.0)
    assert record.model_profile("vgg16", cluster, "peak").time(64) == pytest.approx(64 * per_image / 9.3e12)
    # ResNet-101 lies between ResNet-50 (219 images/s) and ResNet-152 (91.8) as its FLOPs do
    assert 91.8 < record.single_gpu_images_per_s("resnet101") < 219.0
    with pytest.raises(ValueError):
        record.profile_from_flops("x", layers, 1, 0.0)


# ---- Horovod: 128 servers x 4 Pascal GPUs, 25 GbE -----------------------------------------------

@pytest.mark.parametrize("case", record.HOROVOD_CASES, ids=lambda c: c.model)
def test_horovod_scaling_efficiency_is_within_10_points_of_the_published(case):
    pred = record.predict_scaling(case)
    print(f"{case.case}: published {case.published_efficiency:.2f}, predicted {pred.efficiency:.3f} "
          f"({pred.difference * 100:+.1f} points); step 1 GPU {pred.step_one_s * 1e3:.1f} ms, "
          f"{case.gpus} GPUs {pred.step_all_s * 1e3:.1f} ms {pred.breakdown}")
    assert 0.0 < pred.efficiency <= 1.0
    assert abs(pred.difference) <= 0.10


def test_horovod_vgg16_scales_worse_than_resnet101_as_published():
    # VGG-16 has 3.1x ResNet-101's parameters for 2x its FLOPs: more bytes per second of compute.
    resnet, vgg = (record.predict_scaling(c) for c in record.HOROVOD_CASES)
    assert vgg.efficiency < resnet.efficiency - 0.1


def test_horovod_prediction_depends_on_the_network():
    # A 10x faster inter-host link must bring VGG-16 near linear: the test fails if the replay
    # ignored the network.
    case = record.HOROVOD_CASES[1]
    slow = record.predict_scaling(case)
    cluster = record.horovod_cluster(hosts=case.gpus // case.gpus_per_host)
    fast = dataclasses.replace(cluster, inter_host=AlphaBeta(cluster.inter_host.alpha, cluster.inter_host.beta / 10))
    assert record.predict_scaling(case, cluster=fast).efficiency > max(0.9, slow.efficiency + 0.1)


# ---- Megatron's pipeline bubble -----------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 32), (8, 64), (16, 16)])
def test_replayed_bubble_is_megatrons_formula(schedule, p, m):
    assert record.replayed_bubble(p, m, schedule) == pytest.approx(record.megatron_bubble_formula(p, m))
    # unequal forward and backward times do not change it (stages are equal)
    assert record.replayed_bubble(p, m, schedule, 1.0, 3.5) == pytest.approx((p - 1) / m)


def test_record_table_has_every_case_with_its_source():
    rows = record.record_table()
    print("\n" + record.format_table(rows))
    assert len(rows) == len(record.HOROVOD_CASES) + 3
    for case, published, predicted, diff, source in rows:
        assert predicted == pytest.approx(published + diff) and ("arXiv" in source)
