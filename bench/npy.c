/* npy.c — see npy.h. The header is padded so the data starts at a multiple of 64 bytes, as NumPy writes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "npy.h"

static tfb_status npy_write(const char *path, const void *data, const char *descr, int rows, int cols) {
    char dict[256];
    int n = cols > 1 || rows == 0 ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }", descr, rows, cols)
                                  : snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }", descr, rows);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return TFB_ERR_IO;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 0xFF, f);
    fputc(hlen >> 8, f);
    fwrite(dict, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    size_t count = (size_t)rows * (size_t)(cols > 1 ? cols : 1);
    size_t wrote = fwrite(data, 4, count, f);
    return (fclose(f) == 0 && wrote == count) ? TFB_OK : TFB_ERR_IO;
}

tfb_status tfb_npy_write_f32(const char *path, const float *data, int rows, int cols) {
    return npy_write(path, data, "<f4", rows, cols);
}

tfb_status tfb_npy_write_i32(const char *path, const int *data, int rows, int cols) {
    return npy_write(path, data, "<i4", rows, cols);
}

/* Product of the integers inside "(a, b, ...)" of the shape entry; 0 on anything else or on overflow. */
static size_t shape_numel(const char *header) {
    const char *p = strstr(header, "'shape':");
    if (!p || !(p = strchr(p, '('))) return 0;
    size_t n = 1;
    for (p++; *p && *p != ')'; p++) {
        if (*p < '0' || *p > '9') continue;
        char *end;
        unsigned long long d = strtoull(p, &end, 10);
        if (d > ((size_t)1 << 40) || (d && n > ((size_t)1 << 40) / d)) return 0; /* absurd or overflowing */
        n *= (size_t)d;
        p = end - 1;
    }
    return *p == ')' ? n : 0;
}

tfb_status tfb_npy_parse_f32(const void *buf, size_t len, float **data, size_t *numel) {
    const unsigned char *b = buf;
    char header[4096];
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0 || b[6] != 1) return TFB_ERR_IO;
    size_t hlen = b[8] | (size_t)b[9] << 8;
    if (hlen >= sizeof header || 10 + hlen > len) return TFB_ERR_IO;
    memcpy(header, b + 10, hlen);
    header[hlen] = '\0';
    if (!strstr(header, "'<f4'") || !strstr(header, "False")) return TFB_ERR_IO;
    size_t n = shape_numel(header);
    if (n == 0 || (len - 10 - hlen) / 4 < n) return TFB_ERR_IO;
    *data = malloc(n * sizeof(float));
    if (!*data) return TFB_ERR_NOMEM;
    memcpy(*data, b + 10 + hlen, n * sizeof(float));
    *numel = n;
    return TFB_OK;
}

tfb_status tfb_npy_read_f32(const char *path, float **data, size_t *numel) {
    FILE *f = fopen(path, "rb");
    if (!f) return TFB_ERR_IO;
    tfb_status st = TFB_ERR_IO;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    unsigned char *buf = size > 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)size) : NULL;
    if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size) st = tfb_npy_parse_f32(buf, (size_t)size, data, numel);
    free(buf);
    fclose(f);
    return st;
}
