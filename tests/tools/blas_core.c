/* blas_core.c — prints the OpenBLAS kernel family this process runs (openblas_get_corename), so the test
 * script can rerun the determinism-sensitive tests under a different OPENBLAS_CORETYPE. */
#include <stdio.h>

char *openblas_get_corename(void);

int main(void)
{
    printf("%s\n", openblas_get_corename());
    return 0;
}
