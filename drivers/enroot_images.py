"""Driver for enroot images: import each image once onto shared storage, only when it is absent."""

from __future__ import annotations

import posixpath
import shlex

from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts
from reconciler.model import Image


def import_command(image: Image) -> str:
    """`enroot import` into a temp file beside the target, then rename: never a partial image."""
    assert image.uri is not None, "an image without uri is never imported"
    target = shlex.quote(image.path)
    tmp = shlex.quote(image.path + ".reconciler-tmp")
    directory = shlex.quote(posixpath.dirname(image.path))
    return (f"mkdir -p {directory} && rm -f {tmp} && enroot import -o {tmp} {shlex.quote(image.uri)} "
            f"&& mv -f {tmp} {target}")


class EnrootImagesDriver(DriverDefaults):
    """Imports missing images on their import node."""

    name = "enroot_images"
    phase = phase_of("enroot_images")

    def _images(self, ctx: Context, node: str) -> list[Image]:
        return [i for i in ctx.state.images if i.import_on == node]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Stat each image file this node imports."""
        req.stats += [i.path for i in self._images(ctx, node)]

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """A create change for each image file that does not exist (or is empty)."""
        changes = []
        for image in self._images(ctx, node):
            stat = facts.stats.get(image.path)
            if stat and stat.exists and (stat.size or 0) > 0:
                changes.append(Change(node=node, driver=self.name, resource=image.path, action="ok",
                                      phase=self.phase))
                continue
            if image.uri is None:
                changes.append(Change(node=node, driver=self.name, resource=image.path, action="error",
                                      phase=self.phase, summary=f"{image.path} is missing and has no uri to "
                                                                "import it from: set the image's uri"))
                continue
            changes.append(Change(node=node, driver=self.name, resource=image.path, action="create",
                                  phase=self.phase, summary=f"enroot import {image.uri} -> {image.path}",
                                  ops=[RunCommand(command=import_command(image), description="enroot import")]))
        return changes
