"""Readiness: workers whose engine is not ready (failing scrapes, discovery) are left out."""

from __future__ import annotations

from typing import ClassVar

from kinference.routing.plugins.base import PickContext
from kinference.routing.table import IndexArray, WorkerTable


class ReadyFilter:
    name: ClassVar[str] = "ready"

    def filter(self, ctx: PickContext, slots: IndexArray) -> IndexArray:
        return self.filter_slots(ctx.table, slots)

    @staticmethod
    def filter_slots(table: WorkerTable, slots: IndexArray) -> IndexArray:
        kept: IndexArray = slots[table.ready[slots]]
        return kept
