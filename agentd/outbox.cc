#include "agentd/outbox.h"

namespace mlsched::agent {

bool Outbox::IsDurable(const v1::AgentMessage& msg) {
  return msg.msg_case() == v1::AgentMessage::kTaskExited || msg.msg_case() == v1::AgentMessage::kEviction;
}

void Outbox::SetOnline(bool online) {
  std::lock_guard lk(mu_);
  online_ = online;
  if (online) {
    interrupted_ = false;
  } else {
    std::erase_if(queue_, [](const v1::AgentMessage& m) { return !IsDurable(m); });
  }
  cv_.notify_all();
}

void Outbox::Push(v1::AgentMessage msg) {
  std::lock_guard lk(mu_);
  if (!online_ && !IsDurable(msg)) return;
  queue_.push_back(std::move(msg));
  cv_.notify_all();
}

void Outbox::PushFront(v1::AgentMessage msg) {
  if (!IsDurable(msg)) return;
  std::lock_guard lk(mu_);
  queue_.push_front(std::move(msg));
  cv_.notify_all();
}

std::optional<v1::AgentMessage> Outbox::Pop(Clock::time_point until) {
  std::unique_lock lk(mu_);
  cv_.wait_until(lk, until, [&] { return interrupted_ || !queue_.empty(); });
  if (interrupted_ || queue_.empty()) return std::nullopt;
  v1::AgentMessage m = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return m;
}

void Outbox::Interrupt() {
  std::lock_guard lk(mu_);
  interrupted_ = true;
  cv_.notify_all();
}

size_t Outbox::Size() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

bool Outbox::WaitEmpty(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return queue_.empty(); });
}

}  // namespace mlsched::agent
