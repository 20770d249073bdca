#!/bin/bash
touch /app/final
