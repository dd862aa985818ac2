// Host emulation test: tools/dev/emu/run.sh builds it against kernels_src/.
#include "tree_accept.cc"
#include "launch.h"
#include "ref/tree_accept.h"
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
int main() {
    const int R = 200, P = L + 1; int bad = 0;
    for (int it = 0; it < 20; it++) {
        std::vector<int32_t> tok(R * N_MAX), fc(R * N_MAX), ns(R * N_MAX), tg(R * N_MAX), nn(R), cap(R);
        for (int r = 0; r < R; r++) {
            // random forest-ish links, some garbage
            nn[r] = (int)(rnd() % (N_MAX + 3)) - 1; cap[r] = (int)(rnd() % (L + 4)) - 1;
            for (int i = 0; i < N_MAX; i++) { tok[r*N_MAX+i] = rnd() % 3; tg[r*N_MAX+i] = rnd() % 3;
                fc[r*N_MAX+i] = rnd() % 5 == 0 ? -1 : (int)(rnd() % (N_MAX + 2)) - 1;
                ns[r*N_MAX+i] = rnd() % 3 == 0 ? -1 : (int)(rnd() % (N_MAX + 2)) - 1; }
        }
        std::vector<int32_t> gl(R, -9), gi(R * P, -9), gt(R * P, -9), gb(R, -9), cl(R), ci(R * P), ct(R * P), cb(R);
        kdt_tree_accept_params p = {tok.data(), fc.data(), ns.data(), nn.data(), tg.data(), (it & 1) ? cap.data() : NULL, gl.data(), gi.data(), gt.data(), gb.data(), R, 0};
        emu_launch(kdt_tree_accept, p, (R + THREADS - 1) / THREADS, THREADS, 0);
        ref_tree_accept(cl.data(), ci.data(), ct.data(), cb.data(), tok.data(), fc.data(), ns.data(), nn.data(), tg.data(), (it & 1) ? cap.data() : NULL, R, L, N_MAX);
        if (gl != cl || gi != ci || gt != ct || gb != cb) { bad++; printf("it %d mismatch\n", it); }
    }
    printf("tree_accept N_MAX=%d L=%d: %s\n", N_MAX, L, bad ? "FAIL" : "ok");
    return bad;
}
