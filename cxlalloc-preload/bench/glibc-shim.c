/* Preloaded by script/preload-bench.py as the "glibc" allocator: forwards every allocation
 * function to glibc's own malloc, so that a program linked with another allocator (Debian's
 * redis-server links jemalloc) is measured on glibc too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t n, size_t s) { return __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
void *valloc(size_t n) { return __libc_valloc(n); }
void *pvalloc(size_t n) { return __libc_pvalloc(n); }
int posix_memalign(void **out, size_t a, size_t n) {
  if (a == 0 || (a & (a - 1)) || a % sizeof(void *)) return EINVAL;
  void *p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
size_t malloc_usable_size(void *p) {
  static size_t (*real)(void *);
  if (!real) real = (size_t(*)(void *))dlsym(dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY), "malloc_usable_size");
  return p ? real(p) : 0;
}
