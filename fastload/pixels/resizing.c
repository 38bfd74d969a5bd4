/*
 * fastload.pixels._resizing: torch's antialiased uint8 resize (bilinear, bicubic) in one call, with
 * the GIL let go once.
 *
 * torch's kernel (interpolate(..., antialias=True) on uint8, the one torchvision's resize
 * uses) is called from Python in three steps, each letting go of the GIL and taking it back;
 * in a process of many worker threads every such hand-over is a wait. This computes the same
 * numbers, the same way, so its pixels are torch's:
 *
 * - per axis, each output pixel's taps and weights in double, as torch computes them (centre
 *   scale * (i + 0.5), support interp / 2 times the scale when shrinking, the filter taken
 *   at (j + first - centre + 0.5) / scale, weights divided by their sum);
 * - the weights as int16 at the highest precision (up to 22 bits) at which the largest
 *   weight times two stays under 2 ** 15, rounded half away from zero;
 * - the rows first (only the rows the columns pass reads), into uint8, then the columns;
 *   each sum starts at half the precision's unit, is shifted down and clamped to 0..255.
 *
 * An axis whose size does not change is copied (torch skips it; its weights would be one
 * tap of weight one). The output is written channels-first (planes), as torch leaves it,
 * optionally mirrored left-right (a planned flip, at no cost).
 *
 * Python's side is fastload/pixels/resampling.py; without this file built it calls torch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "resizing.h"

PyDoc_STRVAR(resize_doc,
             "resize(src, stride, channels, box, width, height, cubic, mirror) -> bytearray\n\n"
             "Resample the box (x0, y0, x1, y1: whole pixels, end exclusive) of the uint8\n"
             "pixels in the buffer src (rows `stride` bytes apart, `channels` interleaved) to\n"
             "width x height as torch's antialiased bilinear (cubic: bicubic) uint8 resize does;\n"
             "returned as channels x height x width planes, mirrored left-right if asked.");

static PyObject *
resize(PyObject *self, PyObject *args)
{
    PyObject *src_obj;
    Py_ssize_t stride;
    int channels, x0, y0, x1, y1, width, height, cubic, mirror;
    if (!PyArg_ParseTuple(args, "Oni(iiii)iipp:resize", &src_obj, &stride, &channels, &x0, &y0,
                          &x1, &y1, &width, &height, &cubic, &mirror))
        return NULL;
    if (channels < 1 || channels > MAX_CHANNELS || width < 1 || height < 1 || x0 < 0 ||
        y0 < 0 || x1 <= x0 || y1 <= y0 || stride < (Py_ssize_t)x1 * channels) {
        PyErr_Format(PyExc_ValueError,
                     "bad resize: %d channels (1 to %d), box (%d, %d, %d, %d), output %d x %d, "
                     "rows %zd bytes apart",
                     channels, MAX_CHANNELS, x0, y0, x1, y1, width, height, stride);
        return NULL;
    }
    Py_buffer src;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_SIMPLE) < 0)
        return NULL;
    if ((Py_ssize_t)(y1 - 1) * stride + (Py_ssize_t)x1 * channels > src.len) {
        PyErr_Format(PyExc_ValueError, "box (%d, %d, %d, %d) reaches past the %zd source bytes",
                     x0, y0, x1, y1, src.len);
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)channels * width * height);
    if (!out) {
        PyBuffer_Release(&src);
        return NULL;
    }
    ResizeJob job = {(const uint8_t *)src.buf + (size_t)y0 * stride + (size_t)x0 * channels,
               (size_t)stride,
               (size_t)(src.len - ((Py_ssize_t)y0 * stride + (Py_ssize_t)x0 * channels)), x1 - x0, y1 - y0, channels, width, height, cubic, mirror,
               (uint8_t *)PyByteArray_AS_STRING(out), 0.0, 0.0, x1 - x0, y1 - y0, NULL, NULL};
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = resize_planes(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    if (failed) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

static PyMethodDef methods[] = {
    {"resize", resize, METH_VARARGS, resize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_resizing",
    "torch's antialiased uint8 resize, in one call with the GIL let go once.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__resizing(void)
{
    return PyModule_Create(&module);
}
