"""Saving and loading model checkpoints: one directory per checkpoint, written atomically.

A *run directory* (what ``transformer-cpp train --out`` names) holds checkpoints and a pointer::

    runs/tutorial/
        latest                        one line: the name of the newest checkpoint
        epoch-0003/                   the state after 3 complete epochs
        epoch-0004/
        epoch-0005-batch-000417/      interrupted (Ctrl-C) in epoch 5 after 417 of its batches
            config.json               format, model architecture, optimiser settings, training
                                      and data settings, and the size + SHA-256 of every file
            model.safetensors         the weights, one tensor per ``Transformer.parameters()`` name
            optimizer.safetensors     Adam moments, ``<parameter>.m`` / ``<parameter>.v``
            src_tokenizer.json        the source SubwordTokenizer
            tgt_tokenizer.json        the target SubwordTokenizer
            trainer_state.json        epoch, step, dropout counter, position in the epoch,
                                      history (see ``transformer_cpp.training``)

No pickle anywhere: tensors are safetensors, everything else is JSON.

Crash safety. A checkpoint is first written into a hidden temporary directory next to its final
place (``.tmp-<name>-<pid>-<random>``), every file is flushed to disk, and the directory is then
renamed into place with one ``os.replace``. Only after that is ``latest`` rewritten, again through
a temporary file and ``os.replace``. A crash at any moment therefore leaves ``latest`` naming a
complete checkpoint; a half-written temporary directory or pointer file is ignored by
:func:`load_checkpoint` and removed when the run directory is next locked or written.

Housekeeping. Old checkpoints beyond ``keep`` are deleted last, and only those that this run wrote
(``config.json`` records the run's ``run_id``) and that are complete (every file present with the
size ``config.json`` records): a damaged or foreign directory with a checkpoint's name is never
counted or deleted, the one just written and ``best`` are always kept. A checkpoint is deleted by
renaming it to a temporary name first, so a half-deleted one is never listed.

Nothing of the user's is replaced or deleted. A checkpoint is recognised by its manifest
(``config.json`` with the format name and the list of its files, and nothing else in the
directory), a pointer by holding one checkpoint name, the lock file by holding a process id, a
temporary by its full name (``.tmp-<what>-<pid>-<8 hex digits>``). Writing a checkpoint, a
pointer or the lock over anything else of that name, a directory of the user's called
``epoch-0002`` or ``averaged`` say, is refused with ``FileExistsError`` naming it
(:func:`foreign_entries` lists such entries of a run directory before any work).

One writer at a time. Writing into a run directory takes its lock, ``<run>/.lock``
(``fcntl.flock``; :func:`lock_run`); a trainer holds it for the whole of ``fit`` and the command
line for the whole command, so a second process that tries to train or save into the same
directory fails at once with :class:`RunLockedError`.

Loading checks everything it reads and raises :class:`CheckpointError` (a ``ValueError``) with the
path and what is wrong: missing directory or file, invalid JSON, a file whose size or checksum
differs from what ``config.json`` recorded (truncated or damaged), unreadable safetensors, missing
or unexpected tensors, shapes or dtypes that do not match the architecture, NaN or infinite
values (naming the tensor), tokenizers whose vocabulary does not match the model. Saving refuses
weights or moments that are not finite, so a checkpoint that loads is a usable one.

Every task writes this format: a manifest's ``kind`` says which (``translation``, the default of a
manifest without one, or ``language_model``), its ``model`` section is that task's model
configuration, and its other files are the task's own (tokenizers, or a character vocabulary);
:func:`write_checkpoint` writes any of them and :func:`read_file`, :func:`read_json` and
:func:`load_tensors_into` read them back, checked. A run of one task given to the other's loader
is refused in one line naming the commands that read it (:func:`check_kind`).

The parts: ``layout`` (file and checkpoint names, listing, the pointers), ``files`` (atomic writes,
temporaries, the lock), ``saving`` and ``loading`` (with averaging). The names below are the
package's interface; the file names (``CONFIG_FILE``, ``LOCK_FILE``, ...) are importable from it too.
"""

from __future__ import annotations

from .files import check_writable, json_bytes as json_bytes, lock_run
from .layout import (
    AVERAGED_NAME as AVERAGED_NAME,
    BEST_FILE as BEST_FILE,
    CONFIG_FILE as CONFIG_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    LANGUAGE_MODEL_KIND as LANGUAGE_MODEL_KIND,
    LATEST_FILE as LATEST_FILE,
    LOCK_FILE as LOCK_FILE,
    MODEL_FILE as MODEL_FILE,
    OPTIMIZER_FILE as OPTIMIZER_FILE,
    SRC_TOKENIZER_FILE as SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE as TGT_TOKENIZER_FILE,
    TRAINER_STATE_FILE as TRAINER_STATE_FILE,
    TRANSLATION_KIND as TRANSLATION_KIND,
    Checkpoint,
    CheckpointError,
    PathLike as PathLike,
    RunLockedError,
    best_checkpoint,
    check_kind as check_kind,
    checkpoint_kind as checkpoint_kind,
    checkpoint_name,
    foreign_entries,
    latest_checkpoint,
    list_checkpoints,
    refuse_foreign,
    resolve_checkpoint,
)
from .loading import (
    average_checkpoints,
    load_checkpoint,
    load_tensors_into as load_tensors_into,
    read_checkpoint_config,
    read_file as read_file,
    read_json as read_json,
)
from .saving import TensorFile as TensorFile, mark_best, nonfinite_tensors, save_checkpoint
from .saving import tensor_bytes as tensor_bytes
from .saving import write_checkpoint as write_checkpoint

__all__ = [
    "CheckpointError",
    "RunLockedError",
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "checkpoint_name",
    "resolve_checkpoint",
    "read_checkpoint_config",
    "average_checkpoints",
    "mark_best",
    "best_checkpoint",
    "lock_run",
    "check_writable",
    "nonfinite_tensors",
    "foreign_entries",
    "refuse_foreign",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]
