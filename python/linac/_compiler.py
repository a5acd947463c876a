"""Compiling specs into packages, cached on disk.

A package is compiled by the `linac` compiler, which needs MLIR and so is
not part of this Python package: it is found through $LINAC_COMPILER, on the
PATH, or in the build directory of the checkout the package was installed
from. Packages are cached by a hash of the spec's text, the target, the
compile options, the compiler binary's bytes (not its path, so that a
cache filled on one machine serves another with the same build of the
compiler, even where that build cannot run) and the kernel templates it
compiles against where this package can see them ($LINAC_TEMPLATES, else
the checkout's templates/), in the packages/ folder of the
compiler's own cache ($LINAC_CACHE_DIR, else $XDG_CACHE_HOME/linac or
~/.cache/linac). `linac compile`
stages a package beside its destination and renames it into place, so
processes that compile the same spec at once each see a whole package.
"""

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile

from . import _capi


class CompileError(RuntimeError):
    """The compiler refused a spec; the message holds its diagnostics."""


def _checkout_compiler():
    """build*/bin/linac in the checkout this package was installed from."""
    try:
        from ._build_info import SOURCE_DIR
    except ImportError:
        return None
    for build in sorted(os.listdir(SOURCE_DIR)) if os.path.isdir(SOURCE_DIR) else []:
        candidate = os.path.join(SOURCE_DIR, build, 'bin', 'linac')
        if build.startswith('build') and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_compiler():
    """The `linac` compiler's path, or raises CompileError saying where it
    looked."""
    path = (os.environ.get('LINAC_COMPILER') or shutil.which('linac')
            or _checkout_compiler())
    if not path or not os.access(path, os.X_OK):
        raise CompileError(
            'linac: no compiler found: set LINAC_COMPILER, put `linac` on the '
            'PATH, or build it in the checkout (bash .ci/setup)')
    return os.path.abspath(path)


def cache_dir():
    """Where compiled packages are kept."""
    base = os.environ.get('LINAC_CACHE_DIR')
    if not base:
        base = os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.join(
            os.path.expanduser('~'), '.cache'), 'linac')
    return os.path.join(base, 'packages')


@functools.lru_cache(maxsize=None)
def _file_digest(path, size, mtime_ns):
    with open(path, 'rb') as f:
        return hashlib.file_digest(f, 'sha256').hexdigest()


def _compiler_identity(path):
    """What distinguishes one build of the compiler from another: its
    bytes, hashed once a process for each version of the file."""
    info = os.stat(path)
    return _file_digest(path, info.st_size, info.st_mtime_ns)


def _templates_dir():
    """The templates the compiler reads, where this package can see them:
    $LINAC_TEMPLATES, else those of the checkout it runs from or was
    installed from; None when it sees none."""
    candidates = [os.environ.get('LINAC_TEMPLATES'),
                  os.path.join(os.path.dirname(__file__), '..', '..',
                               'templates')]
    try:
        from ._build_info import SOURCE_DIR
        candidates.append(os.path.join(SOURCE_DIR, 'templates'))
    except ImportError:
        pass
    for candidate in candidates:
        if candidate and os.path.isdir(candidate):
            return os.path.abspath(candidate)
    return None


def _templates_identity():
    """What distinguishes one version of the templates from another: their
    files' paths and bytes, hashed again only when a file's size or time
    changes."""
    directory = _templates_dir()
    if directory is None:
        return ''
    stamps = []
    for root, _, files in sorted(os.walk(directory)):
        for name in sorted(files):
            path = os.path.join(root, name)
            info = os.stat(path)
            stamps.append((os.path.relpath(path, directory), info.st_size,
                           info.st_mtime_ns))
    return _directory_digest(directory, tuple(stamps))


@functools.lru_cache(maxsize=None)
def _directory_digest(directory, stamps):
    digest = hashlib.sha256()
    for relative, _, _ in stamps:
        digest.update(relative.encode() + b'\0')
        with open(os.path.join(directory, relative), 'rb') as f:
            digest.update(f.read())
    return digest.hexdigest()


def spec_text(spec):
    """A spec's text: `spec` itself when it holds a layer, else the text of
    the file it names."""
    spec = os.fspath(spec)
    if 'linac.layer' in spec:
        return spec
    with open(spec) as f:
        return f.read()


def package_key(text, target, options, compiler):
    material = '\0'.join([text, target, ' '.join(options),
                          _compiler_identity(compiler),
                          _templates_identity()])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def compile_package(spec, target, options=(), *, cache=None, force=False):
    """The path of `spec` compiled for `target`: from the cache, or compiled
    into it. `force` compiles again whatever the cache holds."""
    text = spec_text(spec)
    compiler = find_compiler()
    options = list(options)
    directory = cache or cache_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory,
                        package_key(text, target, options, compiler) + '.linac')
    if os.path.isdir(path) and not force:
        return path
    fd, source = tempfile.mkstemp(suffix='.mlir', dir=directory)
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
        # A cache entry is linac's to replace, even one left broken.
        done = subprocess.run(
            [compiler, 'compile', source, '--target', target, '-o', path,
             '--force', *options], capture_output=True, text=True)
    finally:
        os.unlink(source)
    if done.returncode != 0:
        raise CompileError(done.stderr.replace(source, '<spec>').strip())
    return path


def open_package(path):
    """A linac_package handle for `path`."""
    handle = _capi.ctypes.c_void_p()
    _capi.check(_capi.lib.linac_package_open(path.encode(),
                                             _capi.ctypes.byref(handle)))
    return handle
