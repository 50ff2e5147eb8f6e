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

/* Product of the integers inside "(a, b, ...)" of the shape entry. */
static size_t shape_numel(const char *header) {
    const char *p = strstr(header, "'shape':");
    if (!p || !(p = strchr(p, '('))) return 0;
    size_t n = 1;
    int any = 0;
    for (p++; *p && *p != ')'; p++) {
        if (*p >= '0' && *p <= '9') { n *= strtoul(p, (char **)&p, 10); any = 1; p--; }
    }
    return any ? n : 1;
}

tfb_status tfb_npy_read_f32(const char *path, float **data, size_t *numel) {
    unsigned char pre[10];
    char header[4096];
    FILE *f = fopen(path, "rb");
    if (!f) return TFB_ERR_IO;
    size_t hlen = 0;
    tfb_status st = TFB_ERR_IO;
    if (fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0 && pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
        if (hlen < sizeof header && fread(header, 1, hlen, f) == hlen) {
            header[hlen] = '\0';
            st = strstr(header, "'<f4'") && strstr(header, "False") ? TFB_OK : TFB_ERR_IO;
        }
    }
    if (st == TFB_OK) {
        *numel = shape_numel(header);
        *data = malloc(*numel * sizeof(float) + 1);
        st = *data && fread(*data, 4, *numel, f) == *numel ? TFB_OK : TFB_ERR_IO;
    }
    fclose(f);
    return st;
}
