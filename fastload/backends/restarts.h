/* restarts.c's function, listed among the _jpegregion extension's methods in jpegregion.c. */
#ifndef FASTLOAD_RESTARTS_H
#define FASTLOAD_RESTARTS_H

#include <Python.h>

extern const char add_restarts_doc[];
PyObject *add_restarts(PyObject *module, PyObject *args);

#endif
