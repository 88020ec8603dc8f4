// The OpenSSL functions the snapshot layer calls, interposed for the test binary that links
// this file (snapshot_tests): each forwards to libcrypto's (dlsym(RTLD_NEXT)) unless the armed
// CallFault (tests/support/call_faults.h) names it, and then fails as OpenSSL reports a
// failure: 0 for the int-returning calls, a null pointer for HMAC and the context
// constructors. On a working library none of them fails; this is how the tests of
// chunk_sealer_openssl_faults_test.cc and snapshot_openssl_faults_test.cc reach the sealers'
// and their callers' error returns. Calls libcrypto makes to itself reach these definitions
// too; they are passed through uncounted (called_from_libcrypto).
#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "tests/support/call_faults.h"

using siesta::test_util::fails;
using siesta::test_util::real_function;

namespace {

// Whether the call comes from inside libcrypto (its random generator encrypts with
// EVP_EncryptUpdate, its one-shot digests call the EVP digest functions): such calls are
// neither counted nor failed, so that a plan's "nth call" is the nth call siesta makes,
// whatever the library does inside.
bool called_from_libcrypto(void* caller, void* real) {
  Dl_info from{}, library{};
  return ::dladdr(caller, &from) != 0 && ::dladdr(real, &library) != 0 &&
         from.dli_fbase == library.dli_fbase;
}

}  // namespace

// Forwards to the real `name` unless the armed plan fails this call, which returns `failed`.
#define SIESTA_FORWARD(name, failed, ...)                                                   \
  static auto* real = real_function<decltype(::name)>(#name);                               \
  if (siesta::test_util::armed_now() &&                                                     \
      !called_from_libcrypto(__builtin_return_address(0), reinterpret_cast<void*>(real)) && \
      fails(#name)) {                                                                       \
    return failed;                                                                          \
  }                                                                                         \
  return real(__VA_ARGS__)

extern "C" {

int RAND_bytes(unsigned char* buf, int num) { SIESTA_FORWARD(RAND_bytes, 0, buf, num); }

unsigned char* HMAC(const EVP_MD* md, const void* key, int key_len, const unsigned char* data,
                    size_t data_len, unsigned char* md_out, unsigned int* md_len) {
  SIESTA_FORWARD(HMAC, nullptr, md, key, key_len, data, data_len, md_out, md_len);
}

EVP_CIPHER_CTX* EVP_CIPHER_CTX_new(void) { SIESTA_FORWARD(EVP_CIPHER_CTX_new, nullptr); }

int EVP_EncryptInit_ex(EVP_CIPHER_CTX* ctx, const EVP_CIPHER* cipher, ENGINE* impl,
                       const unsigned char* key, const unsigned char* iv) {
  SIESTA_FORWARD(EVP_EncryptInit_ex, 0, ctx, cipher, impl, key, iv);
}

int EVP_DecryptInit_ex(EVP_CIPHER_CTX* ctx, const EVP_CIPHER* cipher, ENGINE* impl,
                       const unsigned char* key, const unsigned char* iv) {
  SIESTA_FORWARD(EVP_DecryptInit_ex, 0, ctx, cipher, impl, key, iv);
}

int EVP_EncryptUpdate(EVP_CIPHER_CTX* ctx, unsigned char* out, int* out_len,
                      const unsigned char* in, int in_len) {
  SIESTA_FORWARD(EVP_EncryptUpdate, 0, ctx, out, out_len, in, in_len);
}

int EVP_DecryptUpdate(EVP_CIPHER_CTX* ctx, unsigned char* out, int* out_len,
                      const unsigned char* in, int in_len) {
  SIESTA_FORWARD(EVP_DecryptUpdate, 0, ctx, out, out_len, in, in_len);
}

int EVP_EncryptFinal_ex(EVP_CIPHER_CTX* ctx, unsigned char* out, int* out_len) {
  SIESTA_FORWARD(EVP_EncryptFinal_ex, 0, ctx, out, out_len);
}

int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX* ctx, int type, int arg, void* ptr) {
  SIESTA_FORWARD(EVP_CIPHER_CTX_ctrl, 0, ctx, type, arg, ptr);
}

EVP_MD_CTX* EVP_MD_CTX_new(void) { SIESTA_FORWARD(EVP_MD_CTX_new, nullptr); }

int EVP_DigestInit_ex(EVP_MD_CTX* ctx, const EVP_MD* type, ENGINE* impl) {
  SIESTA_FORWARD(EVP_DigestInit_ex, 0, ctx, type, impl);
}

int EVP_DigestUpdate(EVP_MD_CTX* ctx, const void* data, size_t count) {
  SIESTA_FORWARD(EVP_DigestUpdate, 0, ctx, data, count);
}

int EVP_DigestFinal_ex(EVP_MD_CTX* ctx, unsigned char* md, unsigned int* size) {
  SIESTA_FORWARD(EVP_DigestFinal_ex, 0, ctx, md, size);
}

int EVP_Digest(const void* data, size_t count, unsigned char* md, unsigned int* size,
               const EVP_MD* type, ENGINE* impl) {
  SIESTA_FORWARD(EVP_Digest, 0, data, count, md, size, type, impl);
}

}  // extern "C"
