// Clang thread-safety annotations (no-ops on other compilers). Members that a
// mutex protects are marked GUARDED_BY(mu_); see leveldb's port/ for the idea.
#ifndef KVTRAIN_BASE_THREAD_ANNOTATIONS_H_
#define KVTRAIN_BASE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define KV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KV_THREAD_ANNOTATION(x)
#endif

#define GUARDED_BY(x) KV_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) KV_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) KV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) KV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS KV_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // KVTRAIN_BASE_THREAD_ANNOTATIONS_H_
