// Fuzz target: the S3 ListObjectsV2 answer parser (trainer/s3_store.h), the XML an S3 endpoint
// sends back when mltrain lists checkpoints. Properties: no crash or UB, no exception (a listing
// that throws would stop the trainer's checkpoint recovery); a continuation token is returned only
// for a truncated listing.
#include "fuzz/fuzz_util.h"
#include "trainer/s3_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string xml = mlsched::fuzz::Text(data, size);
  for (const char* root : {"", "run-7/"}) {
    mltrain::S3ListPage page = mltrain::ParseListObjectsV2(xml, root);
    if (!page.next_token.empty()) FUZZ_CHECK(xml.find("<IsTruncated>true</IsTruncated>") != std::string::npos);
  }
  (void)mltrain::XmlTexts(xml, "UploadId");
  return 0;
}
