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

static PyMethodDef methods[] = {
    {"read", read_file, METH_VARARGS, read_doc},
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
