"""Recorded-format fixtures for the Gemini API, written from its public documentation:
byte-exact ``streamGenerateContent?alt=sse`` bodies, complete ``generateContent``
responses and HTTP error bodies.

Streams are what the API sends: one ``data:`` line per ``GenerateContentResponse``
chunk, events separated by ``\\r\\n\\r\\n``, no ``[DONE]`` marker (the chunk with a
``finishReason`` is the last). Every chunk repeats the cumulative ``usageMetadata``,
``modelVersion`` and ``responseId``. Text is raw UTF-8. Complete responses and error
bodies are pretty-printed with two-space indents, as Google's JSON front end does.
"""

from __future__ import annotations

from loopback import split_events


def events(stream: bytes) -> list[bytes]:
    """``stream`` split into one chunk per event (each ending with its blank line)."""
    return split_events(stream, b"\r\n\r\n")


def chunks(stream: bytes, size: int) -> list[bytes]:
    """``stream`` split every ``size`` bytes (cuts lines and UTF-8 characters apart)."""
    return [stream[i : i + size] for i in range(0, len(stream), size)]


# A plain answer in three chunks, no thinking (thinking off on gemini-2.5-flash).
TEXT = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Hello"}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 21,"candidatesTokenCount": 1,"totalTokenCount": 22,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 21}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "X2rOaJ-3BfWm1dkP0YqW8Aw"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": " from the caf\xc3\xa9"}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 21,"candidatesTokenCount": 5,"totalTokenCount": 26,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 21}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "X2rOaJ-3BfWm1dkP0YqW8Aw"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": " \xe2\x98\x95."}],"role": "model"},'
    b'"finishReason": "STOP","index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 21,"candidatesTokenCount": 7,"totalTokenCount": 28,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 21}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "X2rOaJ-3BfWm1dkP0YqW8Aw"}\r\n\r\n'
)

# Thought summaries (includeThoughts), then the answer; the answer's thought signature
# arrives on a final part with empty text. 1024 of the 1200 prompt tokens were cached;
# 256 thought tokens are billed as output.
THINKING_TEXT = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "**Converting units**\\n\\n'
    b'100 km/h is 100000 m per 3600 s.","thought": true}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 1200,"totalTokenCount": 1456,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}],'
    b'"cacheTokensDetails": [{"modality": "TEXT","tokenCount": 1024}],"cachedContentTokenCount": 1024,'
    b'"thoughtsTokenCount": 256},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "b3TOaKmUOsOx1dkPhPG-wQ4"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": " That is 27.78 m/s.","thought": true}],'
    b'"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 1200,"totalTokenCount": 1456,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}],'
    b'"cacheTokensDetails": [{"modality": "TEXT","tokenCount": 1024}],"cachedContentTokenCount": 1024,'
    b'"thoughtsTokenCount": 256},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "b3TOaKmUOsOx1dkPhPG-wQ4"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": "It is "}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 1200,"candidatesTokenCount": 3,"totalTokenCount": 1459,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}],'
    b'"cacheTokensDetails": [{"modality": "TEXT","tokenCount": 1024}],"cachedContentTokenCount": 1024,'
    b'"thoughtsTokenCount": 256},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "b3TOaKmUOsOx1dkPhPG-wQ4"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": "27.78 m/s."}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 1200,"candidatesTokenCount": 84,"totalTokenCount": 1540,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}],'
    b'"cacheTokensDetails": [{"modality": "TEXT","tokenCount": 1024}],"cachedContentTokenCount": 1024,'
    b'"thoughtsTokenCount": 256},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "b3TOaKmUOsOx1dkPhPG-wQ4"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": "",'
    b'"thoughtSignature": "CiQB0e2Kb7mR3Xq9vS1kTn2yZl0QyQ4sYw8cX1e2pW6uM3dXZ5s="}],"role": "model"},'
    b'"finishReason": "STOP","index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 1200,"candidatesTokenCount": 84,"totalTokenCount": 1540,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}],'
    b'"cacheTokensDetails": [{"modality": "TEXT","tokenCount": 1024}],"cachedContentTokenCount": 1024,'
    b'"thoughtsTokenCount": 256},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "b3TOaKmUOsOx1dkPhPG-wQ4"}\r\n\r\n'
)

# Two parallel calls in one chunk, without ids (Gemini 2.5); only the first carries
# the thought signature. Calls finish with STOP and a finishMessage.
PARALLEL_CALLS = (
    b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather",'
    b'"args": {"city": "Paris","unit": "c"}},"thoughtSignature": "CikBcsjafFK168IbtVtoxVV0Tsn8O+eU45rzJahz"},'
    b'{"functionCall": {"name": "get_time","args": {"tz": "Europe/Paris"}}}],"role": "model"},'
    b'"finishReason": "STOP","index": 0,"finishMessage": "Model generated function call(s)."}],'
    b'"usageMetadata": {"promptTokenCount": 83,"candidatesTokenCount": 14,"totalTokenCount": 201,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 83}],"thoughtsTokenCount": 104},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "qpc2afWVFJK4vr0Pq6WiyAU"}\r\n\r\n'
)

# A thought summary, then one call that carries Gemini's own id (Gemini 3) and the
# signature; the call without arguments.
CALL_WITH_ID = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "**Listing files**\\n\\nI will look first.",'
    b'"thought": true}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 52,"totalTokenCount": 90,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 52}],"thoughtsTokenCount": 38},'
    b'"modelVersion": "gemini-3-pro-preview","responseId": "Zm9vYmFyYmF6cXV4MTIz"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"id": "wq6f0y2k","name": "list_files",'
    b'"args": {}},"thoughtSignature": "EpYCCpMCAdHtim9x2Y3Q"}],"role": "model"},'
    b'"finishReason": "STOP","index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 52,"candidatesTokenCount": 9,"totalTokenCount": 99,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 52}],"thoughtsTokenCount": 38},'
    b'"modelVersion": "gemini-3-pro-preview","responseId": "Zm9vYmFyYmF6cXV4MTIz"}\r\n\r\n'
)

# The output limit is reached mid-sentence.
MAX_TOKENS = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Once upon"}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 2,"totalTokenCount": 11,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 9}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "c2FtcGxlLW1heC10b2tlbnM"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": " a time"}],"role": "model"},'
    b'"finishReason": "MAX_TOKENS","index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 16,"totalTokenCount": 25,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 9}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "c2FtcGxlLW1heC10b2tlbnM"}\r\n\r\n'
)

# The answer is stopped by the safety filters after some text: the last chunk has no
# content, only the finish reason and the ratings.
SAFETY = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Here is how"}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 12,"candidatesTokenCount": 3,"totalTokenCount": 15,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 12}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "c2FmZXR5LXN0b3AtMDE"}\r\n\r\n'
    b'data: {"candidates": [{"finishReason": "SAFETY","index": 0,"safetyRatings": ['
    b'{"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT","probability": "NEGLIGIBLE"},'
    b'{"category": "HARM_CATEGORY_HATE_SPEECH","probability": "NEGLIGIBLE"},'
    b'{"category": "HARM_CATEGORY_HARASSMENT","probability": "NEGLIGIBLE"},'
    b'{"category": "HARM_CATEGORY_DANGEROUS_CONTENT","probability": "HIGH","blocked": true}]}],'
    b'"usageMetadata": {"promptTokenCount": 12,"candidatesTokenCount": 3,"totalTokenCount": 15,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 12}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "c2FmZXR5LXN0b3AtMDE"}\r\n\r\n'
)

# The prompt itself is blocked: no candidates, only promptFeedback.
PROMPT_BLOCKED = (
    b'data: {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},'
    b'"usageMetadata": {"promptTokenCount": 31,"totalTokenCount": 31,'
    b'"promptTokensDetails": [{"modality": "TEXT","tokenCount": 31}]},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "YmxvY2tlZC1wcm9tcHQ"}\r\n\r\n'
)

# An error object arrives in place of a chunk after some text.
IN_STREAM_ERROR = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Partial"}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 40,"candidatesTokenCount": 1,"totalTokenCount": 41},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "aW4tc3RyZWFtLWVycm9y"}\r\n\r\n'
    b'data: {"error": {"code": 503,"message": "The model is overloaded. Please try again later.",'
    b'"status": "UNAVAILABLE"}}\r\n\r\n'
)

# A complete generateContent response: a thought summary and an answer whose last
# part carries the signature.
NON_STREAMING = b"""{
  "candidates": [
    {
      "content": {
        "parts": [
          {
            "text": "**Answering**\\n\\nA greeting needs no tools.",
            "thought": true
          },
          {
            "text": "Hi there!",
            "thoughtSignature": "Cp8BAdHtim8nQ2"
          }
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 6,
    "candidatesTokenCount": 3,
    "totalTokenCount": 41,
    "promptTokensDetails": [
      {
        "modality": "TEXT",
        "tokenCount": 6
      }
    ],
    "thoughtsTokenCount": 32
  },
  "modelVersion": "gemini-2.5-flash",
  "responseId": "bm9uLXN0cmVhbWluZy0x"
}
"""

# -- HTTP error bodies ----------------------------------------------------------------

ERROR_429 = b"""{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, model: gemini-2.5-flash\\nPlease retry in 20.372613s.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "quotaDimensions": {
              "location": "global",
              "model": "gemini-2.5-flash"
            },
            "quotaValue": "10"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [
          {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "20s"
      }
    ]
  }
}
"""

# The same failure with a short wait, for tests that honour it.
ERROR_429_SHORT = ERROR_429.replace(b'"retryDelay": "20s"', b'"retryDelay": "0.004s"')

ERROR_503 = b"""{
  "error": {
    "code": 503,
    "message": "The model is overloaded. Please try again later.",
    "status": "UNAVAILABLE"
  }
}
"""

ERROR_500 = b"""{
  "error": {
    "code": 500,
    "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    "status": "INTERNAL"
  }
}
"""

ERROR_401 = b"""{
  "error": {
    "code": 401,
    "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
    "status": "UNAUTHENTICATED"
  }
}
"""

ERROR_403 = b"""{
  "error": {
    "code": 403,
    "message": "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
    "status": "PERMISSION_DENIED"
  }
}
"""

# An invalid key is a 400 whose ErrorInfo reason says what happened.
ERROR_400_KEY = b"""{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {
          "service": "generativelanguage.googleapis.com"
        }
      },
      {
        "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
        "locale": "en-US",
        "message": "API key not valid. Please pass a valid API key."
      }
    ]
  }
}
"""

ERROR_400_OVERFLOW = b"""{
  "error": {
    "code": 400,
    "message": "The input token count (1310720) exceeds the maximum number of tokens allowed (1048576).",
    "status": "INVALID_ARGUMENT"
  }
}
"""

ERROR_400_INVALID = b"""{
  "error": {
    "code": 400,
    "message": "* GenerateContentRequest.contents: contents is not specified\\n",
    "status": "INVALID_ARGUMENT"
  }
}
"""

ERROR_404 = b"""{
  "error": {
    "code": 404,
    "message": "models/gemini-0.9-ultra is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.",
    "status": "NOT_FOUND"
  }
}
"""
