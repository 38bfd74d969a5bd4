/*
 * Part of fastload.backends._jpegregion: rewrite a JPEG with restart markers on a grid of
 * MCUs, without decoding it to pixels (its DCT coefficients are copied, so every pixel stays
 * as it was). jpegregion.c then decodes a crop of it by entropy-decoding only the intervals
 * around the crop, instead of everything above and beside it.
 *
 * The copy is a baseline JPEG with Huffman tables made for the image (also when the original
 * was progressive or arithmetic-coded); its APPn and COM segments (EXIF orientation, ICC
 * profile) are kept. Errors, and warnings about damaged data, leave as ValueError: a file
 * libjpeg has to patch up is better stored as it is, for its readers to report.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "restarts.h"

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} Failure;

static void
fail(j_common_ptr cinfo)
{
    Failure *failure = (Failure *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, failure->message);
    longjmp(failure->jump, 1);
}

/* A warning is damaged data: refuse it as an error (level -1), drop trace messages. */
static void
warn(j_common_ptr cinfo, int level)
{
    if (level < 0)
        fail(cinfo);
}

/* The largest interval of at most 4 MCUs that tiles an MCU row (region decoding cuts only on
 * such a grid): a crop decodes as fast at 1, 2 or 4 MCUs an interval, and every marker costs
 * bytes. */
static unsigned
interval_for(j_decompress_ptr cinfo)
{
    unsigned mcu_width = 8;
    if (cinfo->num_components > 1)
        mcu_width *= (unsigned)cinfo->max_h_samp_factor;
    unsigned row = (cinfo->image_width + mcu_width - 1) / mcu_width;
    return row % 4 == 0 ? 4 : row % 2 == 0 ? 2 : 1;
}

static int
is_app(jpeg_saved_marker_ptr marker, int code, const char *tag, unsigned length)
{
    return marker->marker == code && marker->data_length >= length &&
           memcmp(marker->data, tag, length) == 0;
}

const char add_restarts_doc[] =
    "add_restarts(data, max_pixels, /)\n"
    "--\n\n"
    "The JPEG in data rewritten losslessly with restart markers on a grid of MCUs (1, 2 or 4\n"
    "MCUs an interval, tiling each MCU row), as bytes. Raises ValueError for data libjpeg\n"
    "cannot read or warns about, or an image of more than max_pixels pixels.";

/* The copy's destination: one growing buffer of ours (jpeg_mem_dest frees a buffer it has
 * outgrown, which an error path could not tell from one it still holds). */
typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buffer;
    size_t size, used;
} Sink;

static void
sink_start(j_compress_ptr cinfo)
{
    Sink *sink = (Sink *)cinfo->dest;
    sink->pub.next_output_byte = sink->buffer;
    sink->pub.free_in_buffer = sink->size;
}

static boolean
sink_grow(j_compress_ptr cinfo)
{
    Sink *sink = (Sink *)cinfo->dest;
    unsigned char *grown = realloc(sink->buffer, sink->size * 2);
    if (grown == NULL)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
    sink->pub.next_output_byte = grown + sink->size;
    sink->pub.free_in_buffer = sink->size;
    sink->buffer = grown;
    sink->size *= 2;
    return TRUE;
}

static void
sink_end(j_compress_ptr cinfo)
{
    Sink *sink = (Sink *)cinfo->dest;
    sink->used = sink->size - sink->pub.free_in_buffer;
}

PyObject *
add_restarts(PyObject *module, PyObject *args)
{
    Py_buffer data;
    long long max_pixels;
    if (!PyArg_ParseTuple(args, "y*L:add_restarts", &data, &max_pixels))
        return NULL;

    /* on the heap: the callbacks change it, and a longjmp back here must see that */
    Sink *sink = malloc(sizeof(Sink));
    if (sink != NULL)
        sink->buffer = malloc(data.len + 4096); /* about the size of the copy */
    if (sink == NULL || sink->buffer == NULL) {
        free(sink);
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    sink->size = (size_t)data.len + 4096;
    sink->pub.init_destination = sink_start;
    sink->pub.empty_output_buffer = sink_grow;
    sink->pub.term_destination = sink_end;

    struct jpeg_decompress_struct source;
    struct jpeg_compress_struct copy;
    Failure failure;
    volatile int refused = 0; /* changed after setjmp and read after a longjmp */
    source.err = jpeg_std_error(&failure.pub);
    copy.err = &failure.pub;
    failure.pub.error_exit = fail;
    failure.pub.emit_message = warn;
    jpeg_create_decompress(&source);
    jpeg_create_compress(&copy);
    PyThreadState *unlocked = PyEval_SaveThread();
    if (setjmp(failure.jump)) {
        jpeg_destroy_compress(&copy);
        jpeg_destroy_decompress(&source);
        PyEval_RestoreThread(unlocked);
        PyBuffer_Release(&data);
        free(sink->buffer);
        free(sink);
        if (refused)
            return PyErr_Format(PyExc_ValueError, "%s", failure.message);
        return PyErr_Format(PyExc_ValueError, "libjpeg-turbo: %s", failure.message);
    }
    jpeg_mem_src(&source, (const unsigned char *)data.buf, (unsigned long)data.len);
    jpeg_save_markers(&source, JPEG_COM, 0xFFFF);
    for (int i = 0; i < 16; i++)
        jpeg_save_markers(&source, JPEG_APP0 + i, 0xFFFF);
    jpeg_read_header(&source, TRUE);
    if ((long long)source.image_width * source.image_height > max_pixels) {
        snprintf(failure.message, sizeof failure.message,
                 "image of %u x %u pixels is over max_pixels=%lld", source.image_width,
                 source.image_height, max_pixels);
        refused = 1;
        longjmp(failure.jump, 1);
    }
    jvirt_barray_ptr *coefficients = jpeg_read_coefficients(&source);

    jpeg_copy_critical_parameters(&source, &copy);
    copy.optimize_coding = TRUE;
    copy.restart_interval = interval_for(&source);
    copy.dest = &sink->pub;
    jpeg_write_coefficients(&copy, coefficients);
    for (jpeg_saved_marker_ptr m = source.marker_list; m != NULL; m = m->next) {
        /* the copy writes its own JFIF and Adobe segments, from the copied parameters */
        if (copy.write_JFIF_header && is_app(m, JPEG_APP0, "JFIF", 5))
            continue;
        if (copy.write_Adobe_marker && is_app(m, JPEG_APP0 + 14, "Adobe", 5))
            continue;
        jpeg_write_marker(&copy, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&copy);
    jpeg_finish_decompress(&source);
    jpeg_destroy_compress(&copy);
    jpeg_destroy_decompress(&source);
    PyEval_RestoreThread(unlocked);
    PyBuffer_Release(&data);
    PyObject *result = PyBytes_FromStringAndSize((const char *)sink->buffer, (Py_ssize_t)sink->used);
    free(sink->buffer);
    free(sink);
    return result;
}
