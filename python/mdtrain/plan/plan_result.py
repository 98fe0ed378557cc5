"""What plan() returns: one Plan per strategy and setting, best first, and the skipped ones with
their reason; printing the list gives a table."""
import dataclasses


@dataclasses.dataclass
class Plan:
    strategy_name: str            # the class a user writes: "MirroredStrategy", "PipelineParallel", ...
    num_devices: int
    settings: dict
    step_time_s: float
    memory_per_device_bytes: float
    breakdown: dict               # seconds per step: compute, communication (exposed), update, bubble
    why: str
    skipped: str = None           # the reason, when the strategy does not apply (then no times)
    timeline: object = dataclasses.field(default=None, repr=False)

    @property
    def applicable(self):
        return self.skipped is None

    def row(self):
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        if self.skipped:
            return f"{self.strategy_name:<28} {self.num_devices:>4}  {settings:<44} skipped: {self.skipped}"
        b = self.breakdown
        ms = 1e3
        return (f"{self.strategy_name:<28} {self.num_devices:>4}  {settings:<44} {self.step_time_s * ms:10.3f} "
                f"{b['compute'] * ms:9.3f} {b['communication'] * ms:9.3f} {b['update'] * ms:8.3f} "
                f"{b['bubble'] * ms:8.3f} {self.memory_per_device_bytes / 2**20:10.2f}  {self.why}")


HEADER = (f"{'strategy':<28} {'dev':>4}  {'settings':<44} {'step ms':>10} {'compute':>9} {'comm':>9} "
          f"{'update':>8} {'bubble':>8} {'MiB/dev':>10}  why")


class PlanList(list):
    """Plans best first (shortest step), then the skipped ones. `inputs` says what the
    predictions are made from."""

    def __init__(self, plans, inputs=""):
        ok = sorted((p for p in plans if p.applicable), key=lambda p: (p.step_time_s, p.memory_per_device_bytes))
        super().__init__(ok + [p for p in plans if not p.applicable])
        self.inputs = inputs

    @property
    def best(self):
        return self[0] if self and self[0].applicable else None

    def __str__(self):
        lines = [self.inputs, HEADER] if self.inputs else [HEADER]
        lines += [p.row() for p in self]
        return "\n".join(lines)
