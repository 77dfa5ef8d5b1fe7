"""CPU energy: the kernel's powercap RAPL counters (`/sys/class/powercap/intel-rapl:*/energy_uj`),
wrap-around at `max_energy_range_uj` handled, where this user may read them."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import first_line
from orchestrator.telemetry.defaults import POWERCAP_ROOT


class Unmeasurable(Exception):
    """A device kind that cannot be measured here; the message is the recorded reason."""


_PACKAGE_ZONE = re.compile(r"intel-rapl:\d+$")  # a CPU package (AMD's packages use the same driver name)
_SUB_ZONE = re.compile(r"intel-rapl:\d+:\d+$")  # a package's core, uncore or DRAM domain


@dataclass
class _Zone:
    name: str  # "package-0", "dram"
    energy_file: Path
    wrap_j: float  # max_energy_range_uj in joules: the counter starts from 0 again past it
    last_uj: int = 0
    total_j: float = 0.0


class Rapl:
    """The packages' (and their DRAM domains') energy counters, summed, with wrap-around handled.
    Core and uncore domains are inside their package and not added again; "psys" (the whole
    platform, on some laptops) overlaps the packages and is left out."""

    def __init__(self, root: Path = POWERCAP_ROOT):
        root = Path(root)
        zones = []
        folders = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
        for folder in folders:
            name = _read_text(folder / "name")
            if name is None:
                continue
            if (_PACKAGE_ZONE.match(folder.name) and name.startswith("package")) or \
                    (_SUB_ZONE.match(folder.name) and name == "dram"):
                label = name if name.startswith("package") else f"{name} ({folder.name})"
                zones.append((label, folder))
        if not zones:
            raise Unmeasurable(f"no RAPL package zone under {root} (a VM or container hides it, or the CPU "
                               f"has no RAPL counters)")
        self.zones: list[_Zone] = []
        for label, folder in zones:
            energy, wrap = folder / "energy_uj", folder / "max_energy_range_uj"
            if not energy.exists():
                raise Unmeasurable(f"{energy} is missing (the zone has no energy counter)")
            try:
                first = int(energy.read_text().strip())
                wrap_uj = int(wrap.read_text().strip())
            except PermissionError:
                raise Unmeasurable(f"{energy} is not readable by this user (root only since Linux 5.10, "
                                   f"CVE-2020-8694); run as root or make it readable to measure CPU energy") from None
            except (OSError, ValueError) as error:
                raise Unmeasurable(f"{energy} cannot be read ({first_line(error, 200)})") from None
            self.zones.append(_Zone(label, energy, wrap_uj / 1e6, last_uj=first))

    @property
    def names(self) -> list[str]:
        return [zone.name for zone in self.zones]

    def read_j(self) -> float:
        """Joules since this object was made, every zone together. A counter that went backwards
        wrapped at max_energy_range_uj once (read often enough that it cannot wrap twice)."""
        for zone in self.zones:
            now = int(zone.energy_file.read_text().strip())
            delta = (now - zone.last_uj) / 1e6
            if delta < 0:
                delta += zone.wrap_j
            zone.total_j += delta
            zone.last_uj = now
        return sum(zone.total_j for zone in self.zones)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


