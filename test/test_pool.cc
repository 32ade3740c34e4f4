// The type-stable pools (common/index/pool.h): what a new pool gets from the chunks an
// earlier pool left in the stash. A chunk of the same type is carved again as it is, its
// objects valid below the mark its last pool carved to and zero pages above it, so taking it
// writes nothing and faults in no page its last pool did not touch; a chunk of another type
// has its carved part built as the new type first. Each case runs in its own process, so the
// stash starts empty.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>

#include "index/pool.h"
#include "lib/check_run.h"

namespace {

struct Small {  // 32 bytes; all zero is Small()
    std::atomic<Small *> link{nullptr};
    std::atomic<uint64_t> a{0};
    uint64_t b = 0;
    uint64_t c = 0;
};

struct Large {  // 96 bytes
    std::atomic<Large *> link{nullptr};
    uint64_t words[11] = {};
};

long minor_faults()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

}  // namespace

// Objects of the same type come back where they were, untouched by the new pool (what the
// old one wrote is still there: nothing was rebuilt), and the part never carved is still the
// kernel's zero pages, faulted in only as it is carved now.
START_TEST(same_type_is_carved_again_untouched)
{
    constexpr size_t kCarved = 300;  // about 2 pages of the 64
    std::vector<Small *> first;
    {
        vmt::Pool<Small> pool;
        for (size_t i = 0; i < kCarved; i++) {
            Small *s = pool.alloc();
            ck_assert_ptr_nonnull(s);
            ck_assert(all_zero(s, sizeof *s));  // a fresh chunk's object is zero pages
            s->b = 0x5a5a0000 + i;
            first.push_back(s);
        }
    }  // the chunk goes to the stash
    vmt::Pool<Small> again;
    long faults = minor_faults();
    for (size_t i = 0; i < kCarved; i++) {
        Small *s = again.alloc();
        ck_assert_ptr_eq(s, first[i]);
        ck_assert_uint_eq(s->b, 0x5a5a0000 + i);  // not rebuilt
    }
    long taken = minor_faults() - faults;
    printf("same_type_is_carved_again_untouched: %ld page faults to take %zu objects again\n",
           taken, kCarved);
    // Before: the whole chunk was built into the free list here, 64 pages faulted in. A
    // sanitizer's shadow memory faults in pages of its own as the objects are read.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    ck_assert_int_lt(taken, 8);
#endif
    Small *next = again.alloc();
    ck_assert_ptr_eq(next, first[kCarved - 1] + 1);
    ck_assert(all_zero(next, sizeof *next));
}
END_TEST

// A chunk of another type: its carved part is built as the new type (no stale bytes reach a
// caller), the rest is zero.
START_TEST(other_type_is_built_where_carved)
{
    char *chunk_start = nullptr;
    {
        vmt::Pool<Small> pool;
        for (int i = 0; i < 200; i++) {
            Small *s = pool.alloc();
            memset(static_cast<void *>(s), 0xff, sizeof *s);
            if (!chunk_start)
                chunk_start = reinterpret_cast<char *>(s);
        }
    }
    vmt::Pool<Large> other;
    for (int i = 0; i < 2000; i++) {
        Large *l = other.alloc();
        ck_assert_ptr_nonnull(l);
        if (i == 0)  // it took the stashed chunk (both types start at the same offset)
            ck_assert_ptr_eq(reinterpret_cast<char *>(l), chunk_start);
        ck_assert_msg(all_zero(l, sizeof *l), "object %d of the reused chunk is not Large()", i);
        l->words[0] = 1;
    }
}
END_TEST

// A chunk that went through two pools keeps the higher mark: what the first carved and the
// second did not is still valid when a third takes it.
START_TEST(the_mark_only_grows)
{
    std::vector<Small *> objs;
    {
        vmt::Pool<Small> one;
        for (int i = 0; i < 500; i++) {
            objs.push_back(one.alloc());
            objs.back()->c = 7;
        }
    }
    {
        vmt::Pool<Small> two;
        for (int i = 0; i < 10; i++)
            ck_assert_ptr_eq(two.alloc(), objs[i]);
    }
    vmt::Pool<Small> three;
    for (int i = 0; i < 500; i++) {
        Small *s = three.alloc();
        ck_assert_ptr_eq(s, objs[i]);
        ck_assert_uint_eq(s->c, 7);
    }
    ck_assert(all_zero(three.alloc(), sizeof(Small)));
}
END_TEST

// reserve() and frees across chunks: every object handed out once, none twice, none lost.
START_TEST(reserve_and_free_across_chunks)
{
    constexpr size_t kObjects = 3 * vmt::kPoolChunkBytes / sizeof(Large);
    std::vector<Large *> got;
    {
        vmt::Pool<Large> pool;
        for (size_t i = 0; i < kObjects; i++)
            got.push_back(pool.alloc());
        for (Large *l : got)
            pool.free(l);
    }
    vmt::Pool<Large> pool;
    ck_assert(pool.reserve(64));
    std::vector<Large *> again;
    for (size_t i = 0; i < kObjects; i++) {
        Large *l = pool.alloc();
        ck_assert_ptr_nonnull(l);
        again.push_back(l);
    }
    std::sort(again.begin(), again.end());
    ck_assert(std::adjacent_find(again.begin(), again.end()) == again.end());
}
END_TEST

// Object numbers (id_of, at): every object of several chunks has its own, which names it
// back; 0 and numbers no chunk has name nothing; a chunk taken from the stash is numbered by
// the pool that takes it; numbers past the bits asked for are 0 (no number).
START_TEST(numbers_name_their_objects)
{
    constexpr size_t kObjects = 3 * vmt::kPoolChunkBytes / sizeof(Large);
    std::vector<Large *> got;
    std::vector<uint32_t> ids;
    {
        vmt::Pool<Large> pool;
        ck_assert_ptr_null(pool.at(0));
        ck_assert_ptr_null(pool.at(1));  // no chunk yet
        for (size_t i = 0; i < kObjects; i++) {
            Large *l = pool.alloc();
            ck_assert_ptr_nonnull(l);
            uint32_t id = pool.id_of(l, 24);
            ck_assert_uint_ne(id, 0);
            ck_assert_ptr_eq(pool.at(id), l);
            got.push_back(l);
            ids.push_back(id);
        }
        std::sort(ids.begin(), ids.end());
        ck_assert(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
        ck_assert_ptr_null(pool.at(ids.back() + (1u << 16)));  // a chunk it does not have
        // Too few bits for the third chunk's numbers: those objects have none.
        unsigned bits = 1;
        while ((1ull << bits) <= ids.back())
            bits++;
        ck_assert_uint_eq(pool.id_of(got.back(), bits - 2), 0);
        ck_assert_uint_ne(pool.id_of(got.front(), bits - 2), 0);
    }
    // The same chunks, from the stash, in another pool: numbered again, and named back.
    vmt::Pool<Large> again;
    for (size_t i = 0; i < kObjects; i++) {
        Large *l = again.alloc();
        ck_assert_ptr_eq(again.at(again.id_of(l, 24)), l);
    }
}
END_TEST

int main()
{
    const TTest *const cases[] = {same_type_is_carved_again_untouched,
                                  other_type_is_built_where_carved, the_mark_only_grows,
                                  reserve_and_free_across_chunks, numbers_name_their_objects,
                                  nullptr};
    return check_run_cases("pool", 60, cases);
}
