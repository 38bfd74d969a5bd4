/*
 * fastload.gpu._normalizing: a uint8 batch's planes scaled and shifted into float32, in one pass.
 *
 * x * factor + shift per plane (a channel of one image), the factor and shift of plane p being
 * those of channel p % channels; written as planes too, or with channels_last interleaved pixel
 * by pixel (N x H x W x C memory), so that a channels-last batch costs no second pass.
 * OpenCV's addWeighted, the pass this replaces, reads each plane twice and costs twice the time
 * of the float32 writes themselves; here each uint8 is read once and each float written once.
 * Large planar output (a training batch, read next by another process or the copy to the GPU,
 * not by this core) is written with streaming stores on x86-64, which do not read each cache
 * line before writing it over nor evict the worker's own working set.
 *
 * Python's side is fastload/gpu/functional.py; without this file built it falls back to
 * OpenCV, with the same values. The GIL is released while the planes are written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "../pixels/floats.h"

#define MAX_CHANNELS 64
/* From this many output bytes on, the stores bypass the cache (about a core's L2). */
#define STREAM_FROM (1 << 20)

/* Reads the channels' floats from a sequence; returns the count, or -1 with an error set. */
static Py_ssize_t
floats_of(PyObject *values, const char *name, float *out)
{
    PyObject *seq = PySequence_Fast(values, "factors and shifts must be sequences of floats");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > MAX_CHANNELS) {
        PyErr_Format(PyExc_ValueError, "%s has %zd values; it must have 1 to %d", name, n,
                     MAX_CHANNELS);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        double value = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, k));
        if (value == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        out[k] = (float)value;
    }
    Py_DECREF(seq);
    return n;
}

static int
check_sizes(const Py_buffer *src, const Py_buffer *dst, Py_ssize_t plane, Py_ssize_t channels)
{
    if (dst->itemsize != 4 || dst->format == NULL || strcmp(dst->format, "f") != 0) {
        PyErr_Format(PyExc_ValueError, "dst must hold float32 values, not format %s",
                     dst->format == NULL ? "B" : dst->format);
        return -1;
    }
    if (src->itemsize != 1) {
        PyErr_Format(PyExc_ValueError, "src must hold uint8 values, not %zd-byte items",
                     src->itemsize);
        return -1;
    }
    if (plane < 1 || src->len % plane != 0 || (src->len / plane) % channels != 0) {
        PyErr_Format(PyExc_ValueError,
                     "src's %zd values are not whole planes of %zd values for %zd channels",
                     src->len, plane, channels);
        return -1;
    }
    if (dst->len != 4 * src->len) {
        PyErr_Format(PyExc_ValueError, "dst holds %zd float32 values; src has %zd",
                     dst->len / 4, src->len);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(planes_doc,
             "planes(src, dst, plane, factors, shifts, channels_last=False)\n\n"
             "Write src * factor + shift into dst, plane by plane: src is C-contiguous uint8,\n"
             "dst C-contiguous float32 of as many values, both whole planes of `plane` values;\n"
             "plane p takes factors[p % channels] and shifts[p % channels]. channels_last:\n"
             "dst holds each image's pixels one after the other, its channels together\n"
             "(N x H x W x C memory).");

static PyObject *
planes(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj, *factors_obj, *shifts_obj;
    Py_ssize_t plane;
    int channels_last = 0;
    float factors[MAX_CHANNELS], shifts[MAX_CHANNELS];
    if (!PyArg_ParseTuple(args, "OOnOO|p:planes", &src_obj, &dst_obj, &plane, &factors_obj,
                          &shifts_obj, &channels_last))
        return NULL;
    Py_ssize_t channels = floats_of(factors_obj, "factors", factors);
    if (channels < 0 || floats_of(shifts_obj, "shifts", shifts) != channels) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "factors and shifts must have one value a channel");
        return NULL;
    }
    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) <
        0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (check_sizes(&src, &dst, plane, channels) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    const uint8_t *in = (const uint8_t *)src.buf;
    float *out = (float *)dst.buf;
    Py_ssize_t count = src.len / plane;
    Py_BEGIN_ALLOW_THREADS
    if (channels_last) {
        for (Py_ssize_t p = 0; p < count; p += channels)
            floats_interleaved(in + p * plane, (size_t)plane, (size_t)plane, (int)channels,
                               factors, shifts, out + p * plane);
    }
#if defined(__SSE2__)
    else if (dst.len >= STREAM_FROM) {
        for (Py_ssize_t p = 0; p < count; p++)
            floats_streamed(in + p * plane, out + p * plane, (size_t)plane, factors[p % channels],
                            shifts[p % channels]);
        _mm_sfence(); /* the streamed stores are seen before the batch is handed on */
    }
    else
#endif
    {
        for (Py_ssize_t p = 0; p < count; p++)
            floats_plain(in + p * plane, out + p * plane, (size_t)plane, factors[p % channels],
                         shifts[p % channels]);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"planes", planes, METH_VARARGS, planes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_normalizing",
    "A uint8 batch scaled and shifted plane by plane into float32, in one pass.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__normalizing(void)
{
    return PyModule_Create(&module);
}
