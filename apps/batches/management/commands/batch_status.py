"""``python manage.py batch_status <batch id> [--watch]``: a batch's progress in a terminal."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.batches.models import Batch
from apps.batches.selectors import BatchProgress, progress_of

WIDTH = 40


def progress_bar(progress: BatchProgress, width: int = WIDTH) -> str:
    """``[####....]  45.0%  90/200 done (88 ok, 2 failed)  in_progress  deadline in 3h 12m``."""
    filled = int(round(progress.fraction * width))
    left = progress.seconds_left
    when = (f"deadline in {_duration(left)}" if left > 0 else f"deadline {_duration(-left)} ago")
    if progress.finished_at is not None:
        when = "on time" if progress.on_time else "not on time"
    return (f"[{'#' * filled}{'.' * (width - filled)}] {progress.fraction * 100:5.1f}%  "
            f"{progress.done}/{progress.total} done ({progress.completed} ok, "
            f"{progress.failed} failed)  {progress.status}  {when}")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


class Command(BaseCommand):
    help = "Show a batch's progress; --watch refreshes it until the batch is finished."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("batch_id", help="the batch id (batch_...)")
        parser.add_argument("--watch", action="store_true", help="refresh until finished")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between updates")

    def handle(self, *args: Any, batch_id: str, watch: bool, interval: float,
               **options: Any) -> None:
        batch = Batch.objects.filter(uid=batch_id).first()
        if batch is None:
            raise CommandError(f"No such batch: {batch_id}")
        tty = self.stdout.isatty()
        while True:
            batch.refresh_from_db()
            line = progress_bar(progress_of(batch))
            if watch and tty:
                self.stdout.write(f"\r{line}", ending="")
                self.stdout.flush()
            else:
                self.stdout.write(line)
            if not watch or batch.is_terminal:
                break
            time.sleep(interval)
        if watch and tty:
            self.stdout.write("")
