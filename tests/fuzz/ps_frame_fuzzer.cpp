// libFuzzer target: what a parameter server (or its client) does with bytes off the wire. The
// input is offered as an authenticated frame to FrameAuthenticator::open in both directions
// (request at a server, reply at a client; fixed key, that of the seeds in corpus/ps_frame/,
// written by tests/fuzz/make_corpus.py), and the body of a frame that verifies goes on to
// parse_ps_message. Since mutations rarely keep a tag valid, parse_ps_message also gets the input
// itself and the input after the 56 bytes of frame header as already-verified bodies, so the seeds'
// PS messages are mutated too. Properties: open() returns true or false (a body only when true,
// the frame's own bytes), parse_ps_message returns a message whose payload lies inside its input
// or throws std::invalid_argument, and signing the input as a body opens back to it. A crash, a
// sanitizer report, any other exception or a hang is a finding.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mdtrain/distribute/frame_auth.h"
#include "mdtrain/strategy/parameter_server/ps_message.h"

namespace {

const mdtrain::FrameKey& fuzz_key() {
  static const mdtrain::FrameKey key(std::string("mdtrain-ps-frame-fuzzer-key-0032"));
  return key;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "ps_frame_fuzzer: %s\n", what);
  std::abort();
}

void parse_body(std::string_view body) {
  try {
    const mdtrain::PsMessage m = mdtrain::parse_ps_message(body);
    const bool inside = m.payload.empty() || (m.payload.data() >= body.data() &&
                                              m.payload.data() + m.payload.size() <= body.data() + body.size());
    if (!inside) finding("the parsed payload lies outside its message");
    if (m.header.kind == mdtrain::PsKind::Error || m.header.dtype == mdtrain::PsDType::Bytes)
      (void)std::string(m.payload);  // what the server and client read as text
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // Fresh authenticators per input: a replay window carried over would make the outcome depend on
  // the order of the inputs.
  for (const auto direction : {mdtrain::FrameDirection::Request, mdtrain::FrameDirection::Reply}) {
    mdtrain::FrameAuthenticator receiver(fuzz_key());
    std::string body = "unset";
    if (receiver.open(direction, input, body)) {
      if (body != input.substr(mdtrain::kFrameOverheadBytes)) finding("open() returned other bytes than the body");
      parse_body(body);
      if (receiver.open(direction, input, body)) finding("the same frame was accepted twice");
    } else if (body != "unset") {
      finding("a rejected frame changed the body");
    } else if (receiver.rejected() != 1) {
      finding("a rejected frame was not counted");
    }
  }
  parse_body(input);
  if (input.size() >= mdtrain::kFrameOverheadBytes) parse_body(input.substr(mdtrain::kFrameOverheadBytes));

  mdtrain::FrameAuthenticator sender(fuzz_key()), receiver(fuzz_key());
  std::string body;
  if (!receiver.open(mdtrain::FrameDirection::Request, sender.sign(mdtrain::FrameDirection::Request, input), body) ||
      body != input)
    finding("a signed frame did not open to its body");
  return 0;
}
