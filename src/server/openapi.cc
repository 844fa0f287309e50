// The OpenAPI 3.0 description of the v1 API, served at /openapi.json (docs/api.md).
#include "server/api.h"

namespace tessera::server {

const std::string& OpenApiJson() {
  static const std::string kDoc = R"JSON({
  "openapi": "3.0.3",
  "info": {"title": "Tessera control plane", "version": "v1",
           "description": "Jobs, queues, priority classes, nodes, pools, events, audit, and the node-agent protocol. Every /v1 path needs Authorization: Bearer <token>."},
  "servers": [{"url": "http://127.0.0.1:8080"}],
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "schemas": {
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object",
        "properties": {"code": {"type": "string", "example": "InvalidArgument"},
                       "message": {"type": "string", "example": "spec.tasks[0].template.spec.containers[0].resources.limits.cpu: must not be negative, got -1"},
                       "retryable": {"type": "boolean"}}}}},
      "Job": {"type": "object", "properties": {
        "name": {"type": "string"}, "queue": {"type": "string"}, "priorityClass": {"type": "string"},
        "priority": {"type": "integer"},
        "state": {"type": "string", "enum": ["Pending", "Scheduled", "Running", "Terminating", "Succeeded", "Failed", "Cancelled"]},
        "attempt": {"type": "integer"}, "user": {"type": "string"}, "source": {"type": "string"},
        "restarts": {"type": "integer", "description": "runs after the first: later attempts and tasks restarted alone (kubectl's RESTARTS)"},
        "taskRestarts": {"type": "integer"},
        "array": {"type": "object", "description": "an element of an sbatch job array", "properties": {"name": {"type": "string"}, "jobId": {"type": "integer"}, "index": {"type": "integer"}, "count": {"type": "integer"}, "throttle": {"type": "integer"}}},
        "dependencies": {"type": "array", "items": {"type": "object", "properties": {"condition": {"type": "string", "enum": ["after", "afterany", "afterok", "afternotok"]}, "job": {"type": "string"}, "state": {"type": "string", "enum": ["Waiting", "Satisfied", "NeverSatisfied"]}}}},
        "createdAt": {"type": "integer"}, "startedAt": {"type": "integer"}, "finishedAt": {"type": "integer"},
        "tasks": {"type": "integer"}, "minAvailable": {"type": "integer"}, "gpus": {"type": "string"},
        "exclusive": {"type": "boolean", "description": "its nodes are its own (sbatch --exclusive); charged whole"},
        "runningTasks": {"type": "integer"}, "nodes": {"type": "array", "items": {"type": "string"}},
        "pendingReason": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
        "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
        "allocations": {"type": "array", "items": {"type": "object"}}}},
      "Event": {"type": "object", "properties": {"seq": {"type": "integer"}, "time": {"type": "integer"},
        "type": {"type": "string", "enum": ["Normal", "Warning"]}, "reason": {"type": "string"},
        "object": {"type": "string"}, "message": {"type": "string"}}},
      "List": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object"}},
        "continue": {"type": "string"}, "next": {"type": "integer"}}}
    },
    "responses": {
      "Error": {"description": "an error naming the field or object at fault",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    }
  },
  "security": [{"bearer": []}],
  "paths": {
    "/openapi.json": {"get": {"summary": "this document", "security": [], "responses": {"200": {"description": "OpenAPI 3"}}}},
    "/healthz": {"get": {"summary": "liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
    "/readyz": {"get": {"summary": "readiness: the store takes writes", "security": [], "responses": {"200": {"description": "ok"}, "503": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs": {
      "post": {"summary": "submit jobs: Tessera/Volcano/Kubernetes YAML or JSON (several documents separated by ---), or an #SBATCH script; acknowledged only once durable",
               "requestBody": {"required": true, "content": {"application/yaml": {}, "application/json": {}, "text/x-shellscript": {}}},
               "responses": {"201": {"description": "accepted", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/List"}}}},
                             "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                             "403": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"},
                             "413": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}},
      "get": {"summary": "list jobs visible to the caller, by name",
              "parameters": [{"name": "queue", "in": "query", "schema": {"type": "string"}},
                             {"name": "state", "in": "query", "schema": {"type": "string"}},
                             {"name": "user", "in": "query", "schema": {"type": "string"}},
                             {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 500}},
                             {"name": "continue", "in": "query", "description": "the previous page's continue value", "schema": {"type": "string"}}],
              "responses": {"200": {"description": "a page", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/List"}}}},
                            "400": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "one job", "responses": {"200": {"description": "the job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}}, "404": {"$ref": "#/components/responses/Error"}}},
      "delete": {"summary": "cancel (same as POST .../cancel)", "responses": {"200": {"description": "cancelling"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}/describe": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "job with spec, pending reason, allocations and event history", "responses": {"200": {"description": "the job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}/cancel": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {"summary": "cancel: running tasks get SIGTERM, the grace period, then SIGKILL", "responses": {"200": {"description": "cancelling"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}/hold": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {"summary": "hold a pending job: it stays pending, never placed, until released (scontrol hold)", "responses": {"200": {"description": "held", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}/release": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {"summary": "release a held job: it is scheduled again (scontrol release)", "responses": {"200": {"description": "released", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}/scale": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {"summary": "set a Deployment's replicas (kubectl scale): more are placed as pending tasks; fewer stop the highest-numbered; 0 keeps the job with none (pending reason ScaledToZero); the same count changes nothing",
               "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["replicas"], "additionalProperties": false, "properties": {"replicas": {"type": "integer", "minimum": 0, "maximum": 100000}}}}}},
               "responses": {"200": {"description": "scaled (or already at that count)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/jobs/{name}/logs": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                     {"name": "task", "in": "query", "schema": {"type": "integer", "default": 0}},
                     {"name": "stream", "in": "query", "schema": {"type": "string", "enum": ["stdout", "stderr"]}},
                     {"name": "offset", "in": "query", "schema": {"type": "integer", "default": 0}}],
      "get": {"summary": "task output, proxied from the node agent", "responses": {"200": {"description": "text"}, "404": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}},
    "/v1/events": {"get": {"summary": "events in order (kubectl get events)",
      "parameters": [{"name": "job", "in": "query", "schema": {"type": "string"}},
                     {"name": "object", "in": "query", "description": "only this object's: job/NAME or node/NAME (kind in any case, singular or plural)", "schema": {"type": "string"}},
                     {"name": "type", "in": "query", "schema": {"type": "string", "enum": ["Normal", "Warning"]}},
                     {"name": "after", "in": "query", "description": "only events with seq > after", "schema": {"type": "integer"}},
                     {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 500}}],
      "responses": {"200": {"description": "a page; next = last seq", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/List"}}}}}}},
    "/v1/queues": {"get": {"summary": "queues with usage", "responses": {"200": {"description": "queues"}}},
                   "post": {"summary": "create or replace queues (admin): Volcano or Tessera Queue documents", "responses": {"201": {"description": "applied"}, "400": {"$ref": "#/components/responses/Error"}, "403": {"$ref": "#/components/responses/Error"}}}},
    "/v1/queues/{name}": {"delete": {"summary": "delete a queue (admin); 409 while it has child queues or unfinished jobs", "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}], "responses": {"200": {"description": "deleted"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/priorityclasses": {"get": {"summary": "priority classes", "responses": {"200": {"description": "classes"}}},
                            "post": {"summary": "create or replace priority classes (admin)", "responses": {"201": {"description": "applied"}, "403": {"$ref": "#/components/responses/Error"}}}},
    "/v1/priorityclasses/{name}": {"delete": {"summary": "delete a priority class (admin); 409 while an unfinished job resolves to it", "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}], "responses": {"200": {"description": "deleted"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/nodes": {"get": {"summary": "nodes, readiness, GPU use", "parameters": [{"name": "allocations", "in": "query", "schema": {"type": "boolean"}}], "responses": {"200": {"description": "nodes"}}}},
    "/v1/nodes/{name}": {"delete": {"summary": "forget a NotReady node, releasing what its tasks held (admin)", "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}], "responses": {"200": {"description": "deleted"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/nodes/{name}/{operation}": {"post": {"summary": "cordon, uncordon or drain a node (admin)", "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}, {"name": "operation", "in": "path", "required": true, "schema": {"type": "string", "enum": ["cordon", "uncordon", "drain"]}}], "responses": {"200": {"description": "done"}}}},
    "/v1/pools": {"get": {"summary": "pools and their backends", "responses": {"200": {"description": "pools"}}}},
    "/v1/audit": {"get": {"summary": "audit log of every mutation (admin)", "parameters": [{"name": "after", "in": "query", "schema": {"type": "integer"}}, {"name": "limit", "in": "query", "schema": {"type": "integer"}}], "responses": {"200": {"description": "records"}, "403": {"$ref": "#/components/responses/Error"}}}},
    "/v1/tokens/{name}": {"delete": {"summary": "revoke a token (admin); it stops authenticating at once; 409 for a token from --auth-config or the last admin", "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}], "responses": {"200": {"description": "deleted"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/tokens": {"get": {"summary": "tokens: name, role, queues, origin; never the token or its hash (admin)", "responses": {"200": {"description": "tokens"}, "403": {"$ref": "#/components/responses/Error"}}},
                   "post": {"summary": "create a token (admin); the token is returned once and stored hashed",
      "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"name": {"type": "string"}, "role": {"type": "string", "enum": ["admin", "member", "agent"]}, "queues": {"type": "array", "items": {"type": "string"}}}}}}},
      "responses": {"201": {"description": "created"}, "403": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/v1/agents/register": {"post": {"summary": "node agent registration (docs/agent-protocol.md)", "responses": {"200": {"description": "{node, epoch, heartbeatSeconds}"}, "400": {"$ref": "#/components/responses/Error"}}}},
    "/v1/agents/{node}/heartbeat": {
      "parameters": [{"name": "node", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {"summary": "report tasks and devices; the answer is the node's complete desired allocations", "responses": {"200": {"description": "{allocations, heartbeatSeconds}"}, "409": {"$ref": "#/components/responses/Error"}}}}
  }
})JSON";
  return kDoc;
}

}  // namespace tessera::server
