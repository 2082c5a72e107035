"""One consumer's epoch: the schedule's emission plan turned into samples.

The plan (`reader.schedule.Emission`) says which piece enters the pool before which step and which frame
each step emits. `EpisodePool` acts on admissions: since the admission order is known in advance, it
starts loading rows (one ranged read) and fetching videos (`NodeCache.prefetch`) `prefetch_episodes`
pieces ahead, and on admission waits for them; a video is pinned in the cache while its decoder opens.
`Consumer` walks the plan from a start step (a resume skips by arithmetic: nothing before it is read,
fetched or decoded) and builds each item: rows and delta windows from memory, frames from each piece's
decoders read forward (`reader.decode.video.DecodeCursor`). The plan is known ahead, so `decode_threads` threads
build the next `decode_ahead` items while the current one is handed out; torchcodec and torch release
the GIL, so the threads use the cores of a process without more processes or copies between them.

Once the pool is no longer refilled, each piece emits the rest of its frames one at a time in a random
order (its tail), where a cursor read in that order would seek at nearly every frame. The plan knows
those frames, so `reader.runtime.tails.Tails` hands each camera's cursor the frames still to come when
the piece emits a tail frame, and the cursor decodes them ahead in file order into a buffer bounded per
consumer (`Options.tail_buffer_bytes`, `reader.decode.tail`); the emission order and the values do not
change.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from cache import FetchError, IntegrityError, LrsError
from reader.batch.fill import BatchFill, BatchJob, Lanes, LaneTotals
from reader.decode.depth import is_depth
from reader.decode.images import decode_image
from reader.decode.tail import TAIL_BUFFER_BYTES
from reader.decode.video import Decoders, VideoWhere, decode_frames
from reader.errors import DecodeError
from reader.format.catalog import Catalog, EpisodeRef, VideoRef, changed_since
from reader.plan.source import OpenedSource
from reader.plan.spec import DepthUnit
from reader.runtime.counters import ReaderCounters
from reader.runtime.rows import EpisodeRows, RowGroupReader, read_episode
from reader.runtime.tails import Tails
from reader.schedule import EmissionPlan, Step

# What a decode thread returns: the item (before transforms), frames decoded, seconds spent decoding.
_Built = tuple[dict[str, Any], int, float]

# Threads reading row groups ahead, per consumer: enough to cover a remote's latency at admission time.
ROW_THREADS = 4


@dataclass(frozen=True)
class Options:
    """How a consumer reads, the same for every source of a stream (what differs per source, windows and
    depth quantizers, is the `OpenedSource`'s)."""

    tolerance_s: float
    return_uint8: bool
    image_transforms: Callable[[torch.Tensor], torch.Tensor] | None
    prefetch_episodes: int
    decode_threads: int = 0
    decode_ahead: int = 0
    depth_unit: DepthUnit = "mm"
    tail_buffer_bytes: int = TAIL_BUFFER_BYTES  # fixed, documented (`reader.runtime.tails`); 0: off
    resize: tuple[int, int] | None = None  # images' (height, width); the decoders resize video frames


@dataclass(frozen=True)
class _Slot:
    """A piece in the pool: its rows in memory, its videos in the local cache."""

    source: OpenedSource
    ref: EpisodeRef
    rows: EpisodeRows
    local: bool
    where: tuple[VideoWhere, ...]  # per camera, for messages (made once per piece, not per sample)
    piece: int


class EpisodePool:
    """The pieces one consumer holds, with rows and videos fetched ahead in admission order.

    Videos are pinned in the cache only while a decoder opens them: an open decoder keeps reading its
    file even if the cache evicts it, and a pin held for a piece's whole life would stall any other
    process that must replace or download that file (packed v3 files are shared by many pieces).

    Args:
        refs: the source and episode of each piece, in admission (piece) order.
        needed: whether each piece is emitted at all from the start step on (a resume skips the rest).
        rows: the row group reader of each source (`OpenedSource.position` indexes it).
        prefetch_episodes: pieces whose rows and videos are asked for ahead of admission.
        counters: where admissions are counted.
    """

    def __init__(
        self,
        refs: Sequence[tuple[OpenedSource, EpisodeRef]],
        needed: Sequence[bool],
        rows: Sequence[RowGroupReader],
        *,
        prefetch_episodes: int,
        counters: ReaderCounters,
    ) -> None:
        self._refs, self._needed, self._rows = refs, needed, rows
        self._prefetch_episodes, self._counters = prefetch_episodes, counters
        self._executor = ThreadPoolExecutor(max_workers=ROW_THREADS, thread_name_prefix="lrs-rows")
        self._ahead: dict[int, tuple[Future[EpisodeRows], list[Future[str]]]] = {}
        self._next = 0
        self._slots: dict[int, _Slot] = {}

    def __getitem__(self, piece: int) -> _Slot:
        return self._slots[piece]

    def admit(self, piece: int) -> None:
        """Make `piece` ready to emit: wait for its rows and for its videos to be local."""
        self._prefetch_through(piece + self._prefetch_episodes)
        rows, videos = self._ahead.pop(piece)
        local = all(f.done() and f.exception() is None for f in videos)
        source, ref = self._refs[piece]
        for video, fetched in zip(ref.videos, videos, strict=True):
            with _video_errors(source, ref, video):
                fetched.result()
        where = tuple(VideoWhere(ref.episode_index, v.key, source.display(v.path)) for v in ref.videos)
        self._slots[piece] = _Slot(source, ref, rows.result(), local, where, piece)
        self._counters.add(episodes_admitted=1, admissions_waited=0 if local else 1)

    def release(self, piece: int) -> None:
        """The piece has left the pool: drop its rows."""
        del self._slots[piece]

    @contextlib.contextmanager
    def pinned(self, source: OpenedSource, ref: EpisodeRef, video: VideoRef) -> Iterator[str]:
        """The local path of a video, pinned against eviction for the block (fetched again if evicted)."""
        with (
            _video_errors(source, ref, video),
            source.node_cache.hold(video.path, **_expect(source, video)) as path,
        ):
            yield path

    def close(self) -> None:
        """Drop every piece and stop loading rows (queued loads are cancelled)."""
        self._slots.clear()
        for rows, _ in self._ahead.values():
            rows.cancel()
        self._ahead.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _prefetch_through(self, last: int) -> None:
        while self._next <= min(last, len(self._refs) - 1):
            piece, self._next = self._next, self._next + 1
            if not self._needed[piece]:
                continue
            source, ref = self._refs[piece]
            file = source.display(ref.data_path)
            rows = self._executor.submit(
                _read_rows, self._rows[source.position], ref, source.catalog, file=file
            )
            self._ahead[piece] = (rows, [_prefetch(source, v) for v in ref.videos])


def _prefetch(source: OpenedSource, video: VideoRef) -> Future[str]:
    try:
        return source.node_cache.prefetch(video.path, **_expect(source, video))
    except LrsError as exc:  # a local source fails at once; report it on admission, like a download
        failed: Future[str] = Future()
        failed.set_exception(exc)
        return failed


def _expect(source: OpenedSource, video: VideoRef) -> dict[str, Any]:
    # Checked at every open, read in place or cached: the first time each process opens the file.
    return {"size": video.bytes, "sha256": video.sha256}


@contextlib.contextmanager
def _video_errors(source: OpenedSource, ref: EpisodeRef, video: VideoRef) -> Iterator[None]:
    """Turn a missing or corrupt video into a DecodeError naming the episode, camera and file."""
    where = VideoWhere(ref.episode_index, video.key, source.display(video.path))
    try:
        yield
    except IntegrityError as exc:
        raise DecodeError(
            f"Invalid video {where}: corrupt ({exc}). Expected the file the index lists."
        ) from exc
    except FetchError as exc:
        if source.catalog.remote.exists(video.path):
            raise
        raise DecodeError(
            f"Invalid video {where}: missing. Expected the file meta/episodes points at."
        ) from exc


class _PieceRefs(Sequence[tuple[OpenedSource, EpisodeRef]]):
    """The source and episode of each piece of one consumer, looked up when asked for (no list of the
    consumer's episodes is made: its refs come from the columnar index one at a time)."""

    def __init__(self, refs: Sequence[tuple[OpenedSource, EpisodeRef]], pieces: Sequence[Any]) -> None:
        self._refs, self._pieces = refs, pieces

    def __len__(self) -> int:
        return len(self._pieces)

    def __getitem__(self, piece: Any) -> Any:
        if isinstance(piece, slice):
            return [self[i] for i in range(*piece.indices(len(self)))]
        return self._refs[self._pieces[piece].episode]


class Consumer:
    """Iterates one consumer's samples from step `start` of its emission plan.

    Args:
        emission: the consumer's plan for this epoch.
        refs: the source and episode of each entry of the epoch (`Piece.episode` indexes it).
        start: samples to skip (a resume); they are neither read nor decoded.
        rows: the process's row group reader of each source (`OpenedSource.position` indexes it).
        decoders, counters: the process's decoders and counters.
        options: the stream's options (what does not differ between sources is read from these).
    """

    def __init__(
        self,
        emission: EmissionPlan,
        refs: Sequence[tuple[OpenedSource, EpisodeRef]],
        *,
        start: int,
        rows: Sequence[RowGroupReader],
        decoders: Decoders,
        options: Options,
        counters: ReaderCounters,
    ) -> None:
        self.emission, self.start = emission, start
        self._rows = rows
        self.position = start
        self._refs = _PieceRefs(refs, emission.pieces)
        self._decoders = decoders
        self._options, self._counters = options, counters
        self._tails = Tails(emission, options.tail_buffer_bytes)
        counters.add(skipped=start)

    def __repr__(self) -> str:
        return f"Consumer({self.emission!r}, position={self.position})"

    def __iter__(self) -> Iterator[dict[str, Any]]:
        pool = self._pool()
        threads = self._options.decode_threads
        executor = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="lrs-decode") if threads else None
        )
        ahead: deque[tuple[Step, _Slot, Future[_Built] | None]] = deque()
        latest: dict[int, Future[_Built]] = {}  # piece -> its newest job, which its next one waits for
        try:
            for step in self.emission.steps(self.start):
                for piece in step.admitted:
                    pool.admit(piece)
                slot = pool[step.piece]
                job = None
                if executor is not None:
                    job = executor.submit(self._build, pool, slot, step.frame, latest.get(step.piece))
                    latest[step.piece] = job
                    if step.last:
                        del latest[step.piece]
                ahead.append((step, slot, job))
                if len(ahead) > self._options.decode_ahead:
                    yield self._hand_out(pool, *ahead.popleft())
            while ahead:
                yield self._hand_out(pool, *ahead.popleft())
        finally:
            for _, _, job in ahead:
                if job is not None:
                    job.cancel()
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            pool.close()
            self._tails.close()

    def batches(
        self, batch_size: int, *, lanes: int, ahead: int, channels_last: frozenset[str] = frozenset()
    ) -> Iterator[dict[str, Any]]:
        """The consumer's samples from `start` on, in batches of `batch_size` (the last one may be
        smaller), each the batch `DataLoader(..., num_workers=0, collate_fn=reader.collate)` would give.

        Assembled without a sample ever crossing a thread or process boundary on its own: `lanes` threads
        build the samples of a batch (a piece always on the same lane, so its decoders read forward in
        emission order without waiting on each other) and copy each tensor straight into its row of the
        batch's buffer; `ahead` batches are built while the current one is handed out. The trainer's
        thread only walks the plan, admits pieces and hands finished batches out. The keys in
        `channels_last` come in (..., H, W, C) memory order (the same shapes and values).
        """
        pool = self._pool()
        lanes_ = Lanes(
            [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lrs-lane{i}") for i in range(lanes)],
            channels_last,
        )
        pending: deque[BatchJob] = deque()
        try:
            steps = self.emission.steps(self.start)
            while chunk := list(itertools.islice(steps, batch_size)):
                pending.append(self._submit_batch(pool, chunk, lanes_))
                if len(pending) > ahead:
                    yield self._finish_batch(pending.popleft())
            while pending:
                yield self._finish_batch(pending.popleft())
        finally:
            for job in pending:
                for future in job.lanes:
                    future.cancel()
            for executor in lanes_.executors:
                executor.shutdown(wait=True, cancel_futures=True)
            pool.close()
            self._tails.close()

    def _pool(self) -> EpisodePool:
        """The pool of this iteration: only the pieces still emitted from `start` on are loaded."""
        needed = (self.emission.departure_steps >= self.start).tolist()
        return EpisodePool(
            self._refs,
            needed,
            self._rows,
            prefetch_episodes=self._options.prefetch_episodes,
            counters=self._counters,
        )

    def _submit_batch(self, pool: EpisodePool, steps: list[Step], lanes: Lanes) -> BatchJob:
        """Admit the batch's pieces (in emission order, on this thread) and start building its samples."""
        by_lane: list[list[tuple[int, Step, _Slot]]] = [[] for _ in lanes.executors]
        for row, step in enumerate(steps):
            for piece in step.admitted:
                pool.admit(piece)
            slot = pool[step.piece]
            by_lane[step.piece % len(lanes.executors)].append((row, step, slot))
            if step.last:
                pool.release(step.piece)  # the lane's job holds the slot until it has built the sample
        fill = BatchFill(len(steps), lanes.channels_last)
        futures = [
            executor.submit(self._fill, pool, fill, samples, lanes.transform_lock)
            for executor, samples in zip(lanes.executors, by_lane, strict=True)
            if samples
        ]
        return BatchJob(steps[-1].step, fill, futures)

    def _fill(
        self,
        pool: EpisodePool,
        fill: BatchFill,
        samples: list[tuple[int, Step, _Slot]],
        transform_lock: threading.Lock,
    ) -> LaneTotals:
        """Build `samples` (on a lane thread) into their rows of `fill`."""
        totals = LaneTotals()
        transform = self._options.image_transforms
        # float32 frames: decoded as uint8 and converted as they are copied into the batch (one pass, no
        # float32 frame of their own), unless a transform must see them as floats first.
        late = not self._options.return_uint8 and transform is None
        for row, step, slot in samples:
            item, decoded, seconds = self._build(pool, slot, step.frame, uint8_frames=late, unread=True)
            if transform is not None:
                # One transform at a time across the lanes (of every batch in flight): a user's transform
                # need not be thread-safe.
                with transform_lock:
                    self._transform(slot, item, transform)
            fill.put(row, item, self._late_keys(slot) if late else frozenset())
            totals.add(slot.local, decoded, seconds)
        return totals

    def _finish_batch(self, job: BatchJob) -> dict[str, Any]:
        """Wait for a batch's lanes; count its samples; hand it out."""
        totals = [future.result() for future in job.lanes]
        self._counters.add(
            samples=job.fill.size,
            samples_local=sum(t.local for t in totals),
            frames_decoded=sum(t.decoded for t in totals),
            decode_seconds=sum(t.seconds for t in totals),
        )
        self.position = job.last_step + 1
        return job.fill.batch()

    def _hand_out(
        self, pool: EpisodePool, step: Step, slot: _Slot, job: Future[_Built] | None
    ) -> dict[str, Any]:
        """The finished item of `step` (built now, or waited for), in emission order."""
        built = job.result() if job is not None else self._build(pool, slot, step.frame)
        item, decoded, seconds = built
        if step.last:
            pool.release(step.piece)
        self._counters.add(
            samples=1,
            samples_local=1 if slot.local else 0,
            frames_decoded=decoded,
            decode_seconds=seconds,
        )
        transform = self._options.image_transforms
        if transform is not None:  # on the consumer's thread: a user's transform need not be thread-safe
            self._transform(slot, item, transform)
        self.position = step.step + 1
        return item

    @staticmethod
    def _transform(
        slot: _Slot, item: dict[str, Any], transform: Callable[[torch.Tensor], torch.Tensor]
    ) -> None:
        """Apply the user's image transform to each camera of `item`, in place."""
        info, depth = slot.source.catalog.info, slot.source.depth
        for key in (*info.video_keys, *info.image_keys):
            if key not in depth and key in item:  # lerobot does not transform depth maps either
                item[key] = transform(item[key])

    def _late_keys(self, slot: _Slot) -> frozenset[str]:
        """The cameras of `slot` that `_build(..., uint8_frames=True)` leaves as uint8."""
        source = slot.source
        return frozenset(source.catalog.info.video_keys) - source.depth.keys() - source.drop

    def _build(
        self,
        pool: EpisodePool,
        slot: _Slot,
        frame: int,
        after: Future[_Built] | None = None,
        *,
        uint8_frames: bool = False,
        unread: bool = False,
    ) -> _Built:
        """The item at `frame` of `slot` (its frames decoded, before transforms), the frames decoded and
        the seconds spent decoding. Runs on a decode thread when there are any. With `uint8_frames` the
        camera frames (not depth maps) come as uint8 whatever the stream returns (`_late_keys`); with
        `unread` the rows' tensor columns come as `ColumnRow`s, for `BatchFill` to write.

        `after` is the piece's previous job: its decoders must see the piece's frames in emission order
        (forward), not in whichever order two threads reach them. The thread pool runs jobs in the order
        they were submitted, so that job has already started.
        """
        if after is not None:
            after.exception()  # waits; its error, if any, is raised where its own item is handed out
        source = slot.source
        info = source.catalog.info
        tabular, queries = slot.rows.sample(frame, source.windows, info.video_keys, unread=unread)
        began = time.perf_counter()
        frames = {
            video.key: self._decode(pool, slot, video, where, frame, queries[video.key], uint8_frames)
            for video, where in zip(slot.ref.videos, slot.where, strict=True)
            if video.key not in source.drop
        }
        images = 0
        for key in info.image_keys:
            if key in source.drop:
                continue
            where = f"{key} of episode {slot.ref.episode_index} in {slot.ref.data_path}"
            # Depth maps keep their size, as depth videos do (see `Decoders`).
            size = None if is_depth(info.features[key]) else self._options.resize
            value = tabular[key]
            if isinstance(value, list):  # a window: stacked, as lerobot stacks it
                tabular[key] = torch.stack([self._image(v, where, size) for v in value])
                images += len(value)
            else:
                tabular[key] = self._image(value, where, size)
                images += 1
        seconds = time.perf_counter() - began
        item: dict[str, Any] = {**frames, **tabular}
        item["task"] = source.catalog.tasks[int(slot.rows.arrays["task_index"][frame])]
        for key in source.drop:
            item.pop(key, None)
        if source.dataset_index is not None:
            item["dataset_index"] = torch.tensor(source.dataset_index)  # as lerobot's MultiLeRobotDataset
        decoded = sum(len(queries[key]) for key in frames)
        return item, decoded + images, seconds

    def _image(self, data: bytes | None, where: str, size: tuple[int, int] | None) -> torch.Tensor:
        return decode_image(data, return_uint8=self._options.return_uint8, where=where, resize=size)

    def _decode(
        self,
        pool: EpisodePool,
        slot: _Slot,
        video: VideoRef,
        where: VideoWhere,
        frame: int,
        timestamps: list[float],
        uint8: bool = False,
    ) -> torch.Tensor:
        source = slot.source
        quantizer = source.depth.get(video.key)
        # One decoder per piece and camera: pieces of a packed v3 file each read their own source.
        key = f"{source.position}:{video.path}#{slot.ref.episode_index}"
        cursor = self._decoders.cached(key)
        if cursor is None:
            with pool.pinned(source, slot.ref, video) as path:  # pinned only while its decoder opens
                cursor = self._decoders.open(
                    key,
                    path,
                    where,
                    keep=source.keep.get(video.key, 0),
                    depth_pix_fmt=None if quantizer is None else quantizer.pix_fmt,
                )
        with cursor.lock:
            self._tails.expect(cursor, slot, video, frame)  # in the piece's random tail: decode it ahead
            frames = decode_frames(
                cursor,
                [video.from_timestamp + t for t in timestamps],
                tolerance_s=self._options.tolerance_s,
                return_uint8=self._options.return_uint8 or uint8 or quantizer is not None,  # depth: codes
                where=where,
            )
        if quantizer is not None:
            frames = quantizer.dequantize(frames, self._options.depth_unit)
        # Indexing, not `squeeze(0)`: the same view, without a torch call that hands the GIL to other lanes.
        return frames[0] if frames.shape[0] == 1 else frames


def _read_rows(reader: RowGroupReader, ref: EpisodeRef, catalog: Catalog, *, file: str) -> EpisodeRows:
    """`read_episode`; when the rows cannot be read as the index describes them (row group bytes with
    another CRC-32, a file of another size, an unreadable footer), read the index once more to tell a
    dataset re-published while this stream reads it from a damaged file.

    Raises:
        DatasetError: the dataset changed since the stream opened it (restart to read the new version).
        RowGroupMismatch, DatasetError, FetchError, ...: the index is unchanged: the error as it was.
    """
    try:
        return read_episode(reader, ref, catalog.column_order, file=file)
    except (LrsError, ValueError):
        try:
            now = Catalog.open(catalog.remote)
        except LrsError:
            raise  # the original error: the index cannot even be read again
        if now.fingerprint != catalog.fingerprint:
            raise changed_since(
                catalog.remote.shown,
                catalog.fingerprint,
                now.fingerprint,
                file=file,
                episode=ref.episode_index,
            ) from None
        raise
