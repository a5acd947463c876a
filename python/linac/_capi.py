"""ctypes binding of the runtime's C API (runtime/include/linac/runtime.h).

The structs mirror the header's field for field; liblinac.so exports the C
API alone. Nothing here needs torch or numpy.
"""

import ctypes
import os

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_float_p = ctypes.POINTER(ctypes.c_float)

DTYPES = {'float32': 0, 'bfloat16': 1, 'float16': 2}  # enum linac_dtype


class Error(RuntimeError):
    """A failed runtime call; the message is linac_last_error()'s."""


class InvalidArgument(Error, ValueError):
    """LINAC_ERROR_INVALID_ARGUMENT: a missing, misshapen or unknown tensor."""


class PackageError(Error):
    """LINAC_ERROR_PACKAGE: an unreadable, corrupt or foreign package."""


_ERRORS = {1: InvalidArgument, 2: PackageError, 3: Error, 4: Error}


class HostTensor(ctypes.Structure):  # linac_host_tensor
    _fields_ = [('name', ctypes.c_char_p), ('data', ctypes.c_void_p),
                ('ndim', ctypes.c_int32), ('shape', c_int64_p)]


class DeviceTensor(ctypes.Structure):  # linac_device_tensor
    _fields_ = HostTensor._fields_


class ForwardArgs(ctypes.Structure):  # linac_forward_args
    _fields_ = [('tensors', ctypes.POINTER(HostTensor)),
                ('num_tensors', ctypes.c_size_t),
                ('cu_seqlens', c_int64_p), ('num_cu_seqlens', ctypes.c_size_t),
                ('initial_state', ctypes.c_void_p),
                ('final_state', ctypes.c_void_p), ('output', ctypes.c_void_p),
                ('scale', ctypes.c_float), ('threads', ctypes.c_int32)]


class HostGradient(ctypes.Structure):  # linac_host_gradient
    _fields_ = [('name', ctypes.c_char_p), ('data', ctypes.c_void_p)]


class BackwardArgs(ctypes.Structure):  # linac_backward_args
    _fields_ = [('forward', ForwardArgs), ('d_output', ctypes.c_void_p),
                ('d_final_state', ctypes.c_void_p),
                ('gradients', ctypes.POINTER(HostGradient)),
                ('num_gradients', ctypes.c_size_t),
                ('d_initial_state', ctypes.c_void_p)]


class DeviceForwardArgs(ctypes.Structure):  # linac_device_forward_args
    _fields_ = [('tensors', ctypes.POINTER(DeviceTensor)),
                ('num_tensors', ctypes.c_size_t), ('dtype', ctypes.c_int),
                ('cu_seqlens', c_int64_p), ('num_cu_seqlens', ctypes.c_size_t),
                ('initial_state', ctypes.c_void_p),
                ('final_state', ctypes.c_void_p), ('output', ctypes.c_void_p),
                ('scale', ctypes.c_float), ('stream', ctypes.c_void_p)]


class DeviceGradient(ctypes.Structure):  # linac_device_gradient
    _fields_ = HostGradient._fields_


class DeviceBackwardArgs(ctypes.Structure):  # linac_device_backward_args
    _fields_ = [('forward', DeviceForwardArgs), ('d_output', ctypes.c_void_p),
                ('d_final_state', ctypes.c_void_p),
                ('gradients', ctypes.POINTER(DeviceGradient)),
                ('num_gradients', ctypes.c_size_t),
                ('d_initial_state', ctypes.c_void_p)]


class DecodeArgs(ctypes.Structure):  # linac_decode_args
    _fields_ = [('tensors', ctypes.POINTER(HostTensor)),
                ('num_tensors', ctypes.c_size_t),
                ('state_pool', ctypes.c_void_p), ('pool_shape', c_int64_p),
                ('state_indices', c_int64_p),
                ('num_sequences', ctypes.c_size_t),
                ('output', ctypes.c_void_p), ('scale', ctypes.c_float),
                ('threads', ctypes.c_int32)]


class DeviceDecodeArgs(ctypes.Structure):  # linac_device_decode_args
    _fields_ = [('tensors', ctypes.POINTER(DeviceTensor)),
                ('num_tensors', ctypes.c_size_t), ('dtype', ctypes.c_int),
                ('state_pool', ctypes.c_void_p), ('pool_shape', c_int64_p),
                ('state_indices', ctypes.c_void_p),
                ('num_sequences', ctypes.c_size_t),
                ('output', ctypes.c_void_p), ('scale', ctypes.c_float),
                ('stream', ctypes.c_void_p)]


def _library_path():
    """$LINAC_LIBRARY, else the liblinac.so installed beside this module."""
    path = os.environ.get('LINAC_LIBRARY')
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ('liblinac.so', 'lib/liblinac.so'):
        candidate = os.path.join(here, name)
        if os.path.exists(candidate):
            return candidate
    raise ImportError(
        f'linac: no liblinac.so in {here}; install the package with pip '
        '(pip install ./python) or set LINAC_LIBRARY')


def _bind(lib):
    status = ctypes.c_int
    signatures = {
        'linac_last_error': (ctypes.c_char_p, []),
        'linac_package_open': (status, [ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_void_p)]),
        'linac_package_close': (None, [ctypes.c_void_p]),
        'linac_package_num_arguments': (ctypes.c_size_t, [ctypes.c_void_p]),
        'linac_package_argument': (status, [
            ctypes.c_void_p, ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_char_p)]),
        'linac_package_argument_kind': (ctypes.c_char_p,
                                        [ctypes.c_void_p, ctypes.c_size_t]),
        'linac_package_target': (ctypes.c_char_p, [ctypes.c_void_p]),
        'linac_package_layer': (ctypes.c_char_p, [ctypes.c_void_p]),
        'linac_package_dims': (status, [ctypes.c_void_p] + [c_int64_p] * 4),
        'linac_forward_host': (status, [ctypes.c_void_p,
                                        ctypes.POINTER(ForwardArgs)]),
        'linac_states_host': (status, [ctypes.c_void_p,
                                       ctypes.POINTER(ForwardArgs),
                                       ctypes.c_void_p]),
        'linac_forward_device': (status, [ctypes.c_void_p,
                                          ctypes.POINTER(DeviceForwardArgs)]),
        'linac_backward_host': (status, [ctypes.c_void_p,
                                         ctypes.POINTER(BackwardArgs)]),
        'linac_backward_device': (status, [
            ctypes.c_void_p, ctypes.POINTER(DeviceBackwardArgs)]),
        'linac_backward_device_workspace': (status, [
            ctypes.c_void_p, ctypes.POINTER(DeviceForwardArgs),
            ctypes.POINTER(ctypes.c_size_t)]),
        'linac_decode_host': (status, [ctypes.c_void_p,
                                       ctypes.POINTER(DecodeArgs)]),
        'linac_decode_device': (status, [ctypes.c_void_p,
                                         ctypes.POINTER(DeviceDecodeArgs)]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


lib = _bind(ctypes.CDLL(_library_path()))


def check(status):
    """Raises the error a nonzero linac_status names."""
    if status != 0:
        message = lib.linac_last_error().decode()
        raise _ERRORS.get(status, Error)(message)


def shape_array(shape):
    return (ctypes.c_int64 * len(shape))(*shape)
