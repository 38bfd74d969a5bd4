/*
 * fastload.backends._files: a whole file's bytes, the GIL let go twice.
 *
 * Python's os.open, os.fstat, os.read and os.close each let go of the GIL and take it back: in
 * a process of many worker threads each is a wait for the GIL, four a sample. Here the file is
 * opened and sized in one stretch without the GIL and read and closed in a second, straight
 * into the bytes object made between them (no copy).
 *
 * Python's side is fastload/backends/base.py (read_file); without this file built it reads
 * with os.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read up to `size` bytes at `buf`; the count read, or -1 with errno set. */
static Py_ssize_t
read_all(int fd, char *buf, Py_ssize_t size)
{
    Py_ssize_t done = 0;
    while (done < size) {
        ssize_t n = read(fd, buf + done, (size_t)(size - done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        done += n;
    }
    return done;
}

PyDoc_STRVAR(read_doc,
             "read(path) -> bytes | None\n\n"
             "The file's bytes, read in one go of the size fstat gives; None when the file\n"
             "is not a regular file or changed size while read (the caller reads it another\n"
             "way). Raises OSError (FileNotFoundError, PermissionError, ...) as open does.");

static PyObject *
read_file(PyObject *self, PyObject *args)
{
    PyObject *path_bytes = NULL;
    if (!PyArg_ParseTuple(args, "O&:read", PyUnicode_FSConverter, &path_bytes))
        return NULL;
    const char *path = PyBytes_AS_STRING(path_bytes);
    int fd, failed_stat = 0;
    struct stat st;
    Py_BEGIN_ALLOW_THREADS
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) < 0)
        failed_stat = 1;
    Py_END_ALLOW_THREADS
    if (fd < 0 || failed_stat) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, PyTuple_GET_ITEM(args, 0));
        if (fd >= 0)
            close(fd);
        Py_DECREF(path_bytes);
        return NULL;
    }
    Py_DECREF(path_bytes);
    if (!S_ISREG(st.st_mode)) { /* a pipe, /proc: no size to read at once */
        close(fd);
        Py_RETURN_NONE;
    }
    Py_ssize_t size = (Py_ssize_t)st.st_size;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) {
        close(fd);
        return NULL;
    }
    Py_ssize_t got;
    int error = 0;
    char more;
    Py_BEGIN_ALLOW_THREADS
    got = read_all(fd, PyBytes_AS_STRING(out), size);
    if (got == size && read_all(fd, &more, 1) != 0) /* grown since fstat (or failed) */
        got = -2;
    error = errno;
    close(fd);
    Py_END_ALLOW_THREADS
    if (got == -1) {
        Py_DECREF(out);
        errno = error;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, PyTuple_GET_ITEM(args, 0));
    }
    if (got != size) { /* the file changed since fstat, or a short read */
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

#define MANY_OPEN 64

/* The files of read_many(), while they are read. */
typedef struct {
    PyObject *name; /* the path, from PyUnicode_FSConverter */
    int fd;         /* -1: not opened (or not a regular file): None */
    Py_ssize_t size;
    PyObject *bytes;
} Pending;

static void
pending_free(Pending *files, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        if (files[k].fd >= 0)
            close(files[k].fd);
        Py_XDECREF(files[k].name);
        Py_XDECREF(files[k].bytes);
    }
    PyMem_Free(files);
}

/* Open and size every file (the GIL let go once by the caller); a file that cannot be opened
 * or sized, or is not regular, is left unopened. */
static void
open_all(Pending *files, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        struct stat st;
        int fd = open(PyBytes_AS_STRING(files[k].name), O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
            close(fd);
            fd = -1;
        }
        files[k].fd = fd;
        files[k].size = fd >= 0 ? (Py_ssize_t)st.st_size : 0;
    }
}

/* Read and close every opened file into its bytes object; one that changed size or failed
 * loses its bytes object (after the GIL is taken back). */
static void
read_all_files(Pending *files, Py_ssize_t n, int *whole)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        whole[k] = 0;
        if (files[k].fd < 0)
            continue;
        char more;
        Py_ssize_t got = read_all(files[k].fd, PyBytes_AS_STRING(files[k].bytes), files[k].size);
        whole[k] = got == files[k].size && read_all(files[k].fd, &more, 1) == 0;
        close(files[k].fd);
        files[k].fd = -1;
    }
}

PyDoc_STRVAR(read_many_doc,
             "read_many(paths) -> list[bytes | None]\n\n"
             "read() for each path of a list, the GIL let go twice for each 64 of them (once\n"
             "to open and size them, once to read and close them). None for a file that could\n"
             "not be opened or read, is not a regular file, or changed size while read:\n"
             "read() on it alone reads it, or raises the error.");

static PyObject *
read_many(PyObject *self, PyObject *args)
{
    PyObject *paths;
    if (!PyArg_ParseTuple(args, "O!:read_many", &PyList_Type, &paths))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(paths);
    Pending *files = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Pending));
    int *whole = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(int));
    if (files == NULL || whole == NULL) {
        PyMem_Free(files);
        PyMem_Free(whole);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++)
        files[k].fd = -1;
    PyObject *out = NULL;
    for (Py_ssize_t k = 0; k < n; k++)
        if (!PyUnicode_FSConverter(PyList_GET_ITEM(paths, k), &files[k].name))
            goto done;
    /* MANY_OPEN files at a time: a large batch must not hold more descriptors open than the
     * process may have (1,024 by default) */
    for (Py_ssize_t start = 0; start < n; start += MANY_OPEN) {
        Py_ssize_t count = n - start < MANY_OPEN ? n - start : MANY_OPEN;
        Pending *chunk = files + start;
        Py_BEGIN_ALLOW_THREADS
        open_all(chunk, count);
        Py_END_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < count; k++)
            if (chunk[k].fd >= 0 &&
                (chunk[k].bytes = PyBytes_FromStringAndSize(NULL, chunk[k].size)) == NULL)
                goto done;
        Py_BEGIN_ALLOW_THREADS
        read_all_files(chunk, count, whole + start);
        Py_END_ALLOW_THREADS
    }
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        PyObject *item = whole[k] ? files[k].bytes : Py_None;
        Py_INCREF(item);
        PyList_SET_ITEM(out, k, item);
    }
done:
    pending_free(files, n);
    PyMem_Free(whole);
    return out;
}

static PyMethodDef methods[] = {
    {"read", read_file, METH_VARARGS, read_doc},
    {"read_many", read_many, METH_VARARGS, read_many_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_files",
    "A whole file's bytes, the GIL let go twice.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__files(void)
{
    return PyModule_Create(&module);
}
