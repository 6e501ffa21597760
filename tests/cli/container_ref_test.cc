#include <catch2/catch.hpp>

#include "common/container_ref.h"

using namespace mlsched;

namespace {

ImageRef Parse(const std::string& text) {
  ImageRef r;
  const std::string err = ParseImageRef(text, &r);
  INFO(text << ": " << err);
  REQUIRE(err.empty());
  // The canonical text parses back to the same reference.
  ImageRef again;
  REQUIRE(ParseImageRef(r.Canonical(), &again).empty());
  CHECK(again.Canonical() == r.Canonical());
  return r;
}

std::string Error(const std::string& text) {
  ImageRef r;
  return ParseImageRef(text, &r);
}

}  // namespace

TEST_CASE("container image: docker references are normalized as docker does", "[container]") {
  CHECK(Parse("busybox").Canonical() == "docker://docker.io/library/busybox:latest");
  CHECK(Parse("ubuntu:22.04").Canonical() == "docker://docker.io/library/ubuntu:22.04");
  CHECK(Parse("docker://pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime").Canonical() ==
        "docker://docker.io/pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime");
  const ImageRef nv = Parse("nvcr.io/nvidia/pytorch:24.05-py3");
  CHECK(nv.registry == "nvcr.io");
  CHECK(nv.repository == "nvidia/pytorch");
  CHECK(nv.tag == "24.05-py3");
  // enroot's REGISTRY#NAME, as pyxis users write it.
  CHECK(Parse("nvcr.io#nvidia/pytorch:24.05-py3").Canonical() == nv.Canonical());
  CHECK(Parse("docker://localhost:5000/team/train").Canonical() == "docker://localhost:5000/team/train:latest");
  CHECK(Parse("localhost/train:v1").registry == "localhost");
  const std::string digest = "sha256:" + std::string(64, 'a');
  const ImageRef pinned = Parse("registry.example.com:443/a/b@" + digest);
  CHECK(pinned.digest == digest);
  CHECK(pinned.tag.empty());
  CHECK(Parse("a/b:v2@" + digest).Canonical() == "docker://docker.io/a/b:v2@" + digest);
  CHECK(Parse("my_team/data-prep.v2__x").repository == "my_team/data-prep.v2__x");
}

TEST_CASE("container image: node-local transports", "[container]") {
  const ImageRef a = Parse("oci-archive:/shared/images/train.tar");
  CHECK(a.transport == ImageTransport::kOciArchive);
  CHECK(a.path == "/shared/images/train.tar");
  CHECK(Parse("oci-archive:/x/y.tar:v1").tag == "v1");
  CHECK(Parse("docker-archive:/x/y.tar").transport == ImageTransport::kDockerArchive);
  const ImageRef l = Parse("oci:/shared/layouts/train:2024");
  CHECK(l.transport == ImageTransport::kOciLayout);
  CHECK(l.path == "/shared/layouts/train");
  CHECK(l.tag == "2024");
}

TEST_CASE("container image: bad references are refused with the reason", "[container]") {
  CHECK(Error("").find("empty") != std::string::npos);
  CHECK(Error("Ubuntu").find("lowercase") != std::string::npos);
  CHECK(Error("dir:/tmp/x").find("unknown image transport 'dir:'") != std::string::npos);
  CHECK(Error("containers-storage:x").find("unknown image transport") != std::string::npos);
  CHECK(Error("https://example.com/x").find("unknown image transport 'https:'") != std::string::npos);
  CHECK(Error("alice:secret@registry.example.com/x").find("credentials") != std::string::npos);
  CHECK(Error("x@sha256:abc").find("64 lowercase hex") != std::string::npos);
  CHECK(Error("x@md5:" + std::string(32, 'a')).find("sha256") != std::string::npos);
  CHECK(Error("alice@nvcr.io#nvidia/pytorch").find("credentials") != std::string::npos);
  CHECK(Error("a/b@sha512:" + std::string(128, 'a')).find("sha256") != std::string::npos);
  CHECK(Error("x:-bad").find("tag") != std::string::npos);
  CHECK(Error("x:" + std::string(129, 't')).find("tag") != std::string::npos);
  CHECK(Error("a//b").find("empty path component") != std::string::npos);
  CHECK(Error("a/b/").find("empty path component") != std::string::npos);
  CHECK(Error("x/a..b").find("component") != std::string::npos);
  CHECK(Error("a..b/c").find("registry 'a..b' is not HOST[:PORT]") != std::string::npos);
  CHECK(Error("-a/b").find("component") != std::string::npos);
  CHECK(Error("bad_host:99999/x").find("HOST[:PORT]") != std::string::npos);
  CHECK(Error("nv#ti").find("needs a '.', a :PORT or to be localhost") != std::string::npos);  // found by the fuzzer
  CHECK(Parse("localhost#ti").Canonical() == "docker://localhost/ti:latest");
  CHECK(Error("busy box").find("space") != std::string::npos);
  CHECK(Error("busybox\n").find("control") != std::string::npos);
  CHECK(Error("x/" + std::string(300, 'a')).find("longer than 255") != std::string::npos);
  CHECK(Error(std::string(1025, 'a')).find("limit is 1024") != std::string::npos);
  CHECK(Error("oci-archive:relative.tar").find("absolute") != std::string::npos);
  CHECK(Error("oci:/a/../etc").find("clean path") != std::string::npos);
  CHECK(Error("docker-archive:/a/b.tar:tag").find("':'") != std::string::npos);
  CHECK(Error("oci:/a/b:").find("reference") != std::string::npos);
}

TEST_CASE("container mounts: pyxis's SRC[:DST[:ro|rw]] list", "[container]") {
  std::vector<ContainerMountSpec> m;
  REQUIRE(ParseContainerMounts("/data,/scratch/alice:/scratch:rw,/models:/models:ro", &m).empty());
  REQUIRE(m.size() == 3);
  CHECK(m[0] == ContainerMountSpec{"/data", "/data", false});
  CHECK(m[1] == ContainerMountSpec{"/scratch/alice", "/scratch", false});
  CHECK(m[2] == ContainerMountSpec{"/models", "/models", true});

  auto err = [](const std::string& text) {
    std::vector<ContainerMountSpec> out{{"/keep", "/keep", false}};
    std::string e = ParseContainerMounts(text, &out);
    CHECK(out.size() == 1);  // nothing written on an error
    return e;
  };
  CHECK(err("data:/data").find("absolute") != std::string::npos);
  CHECK(err("/data:data").find("mount target 'data' must be an absolute path") != std::string::npos);
  CHECK(err("/a:/b:rx").find("ro or rw") != std::string::npos);
  CHECK(err("/a:/b:ro:x").find("SRC[:DST[:ro|rw]]") != std::string::npos);
  CHECK(err("/a:/").find("hide the image") != std::string::npos);
  CHECK(err("/a:/proc/self").find("under /proc") != std::string::npos);
  CHECK(err("/a:/dev").find("under /dev") != std::string::npos);
  CHECK(err("/a:/sys/fs").find("under /sys") != std::string::npos);
  CHECK(err("/a/../etc:/etc2").find("clean path") != std::string::npos);
  CHECK(err("/a:/x,/b:/x").find("given twice") != std::string::npos);
  CHECK(err("/a,").find("ends with ','") != std::string::npos);
  CHECK(err("/a:/b/").find("ends with '/'") != std::string::npos);
  CHECK(err("").find("expected") != std::string::npos);
  std::string many;
  for (int i = 0; i <= static_cast<int>(kMaxContainerMounts); ++i) many += (i ? "," : "") + std::string("/m") + std::to_string(i);
  CHECK(err(many).find("more than 64 mounts") != std::string::npos);
  CHECK(err("/" + std::string(5000, 'a')).find("limit is 4096") != std::string::npos);
}

TEST_CASE("container env: names of the job's environment that override the image's", "[container]") {
  std::vector<std::string> names;
  REQUIRE(ParseContainerEnvNames("HF_TOKEN,WANDB_API_KEY,HF_TOKEN,_X1", &names).empty());
  CHECK(names == std::vector<std::string>{"HF_TOKEN", "WANDB_API_KEY", "_X1"});
  CHECK(ParseContainerEnvNames("1X", &names).find("[A-Za-z_]") != std::string::npos);
  CHECK(ParseContainerEnvNames("A=B", &names).find("[A-Za-z_]") != std::string::npos);
  CHECK(ParseContainerEnvNames("A,", &names).find("expected") != std::string::npos);
  CHECK(ParseContainerEnvNames(",", &names).find("empty") != std::string::npos);
  CHECK(ParseContainerEnvNames(std::string(300, 'A'), &names).find("limit is 256") != std::string::npos);
  CHECK(names == std::vector<std::string>{"HF_TOKEN", "WANDB_API_KEY", "_X1"});
}
