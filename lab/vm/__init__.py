"""The VM lab: guests with Debian's own kernel, for what this machine's kernel lacks
(LIO, open-iscsi, bonding, netem and fq, kernel modules).

- :mod:`.image`: :func:`ensure_image` builds (once, cached by package list) a
  bookworm image from Debian's packages with mmdebstrap;
- :mod:`.guest`: :class:`Guest` boots one under qemu (KVM where usable, TCG
  otherwise) on taps in a lab namespace and runs commands in it;
- :mod:`.net`: taps and the namespace the guests' links end in.

Under TCG a guest's network carries about 0.9 Gbit/s: this lab is for behaviour,
not speed.
"""

from reservoir.lab.vm.guest import Guest, GuestCommandError, Result, accelerator
from reservoir.lab.vm.image import (
    BASE_PACKAGES,
    LAB_PACKAGES,
    MODULE_BUILD_PACKAGES,
    GuestImage,
    VmUnavailable,
    ensure_image,
)
from reservoir.lab.vm.net import add_tap, serving_target

__all__ = [
    "BASE_PACKAGES",
    "LAB_PACKAGES",
    "MODULE_BUILD_PACKAGES",
    "Guest",
    "GuestCommandError",
    "GuestImage",
    "Result",
    "VmUnavailable",
    "accelerator",
    "add_tap",
    "ensure_image",
    "serving_target",
]
